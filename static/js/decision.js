// The decision pane's keyboard shortcuts, its focus after an in-place answer, and its deadline
// countdown. Loaded with defer from <head>; every action also works without it (plain forms),
// and it needs no inline script, hx-on or trigger filter (the CSP and allowEval=false forbid
// them). Keys act only while no text field has focus; Escape leaves a field.
(function () {
  "use strict";
  if (window.guardianDecision) return; // a Back restore must not bind the keys twice
  window.guardianDecision = true;

  var AREA = "decision-area";
  var TEXT_TYPES = ["text", "search", "email", "url", "tel", "password", "number", ""];

  function typing(target) {
    if (!target || !target.tagName) return false;
    if (target.isContentEditable) return true;
    var tag = target.tagName.toLowerCase();
    if (tag === "textarea" || tag === "select") return true;
    // A checkbox or a radio button takes no text: the shortcuts still work on it.
    return tag === "input" && TEXT_TYPES.indexOf((target.getAttribute("type") || "").toLowerCase()) >= 0;
  }

  function find(name) {
    return document.querySelector("[data-shortcut='" + name + "']");
  }

  function press(name) {
    var button = find(name);
    if (!button || button.disabled) return false;
    button.click(); // the submitter's name and value go with the form, with htmx or without
    return true;
  }

  function focusField(field) {
    if (!field) return false;
    var details = field.closest("details");
    if (details) details.open = true;
    field.focus();
    field.scrollIntoView({ block: "nearest" });
    return true;
  }

  function toggleShortcuts() {
    var dialog = document.getElementById("shortcuts");
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  // y / n answer the guardian's question when it asked exactly one, and it is yes-or-no.
  function answer(value) {
    var questions = document.querySelectorAll("#decision-form .question");
    if (questions.length !== 1) return false;
    var radio = questions[0].querySelector("input[data-answer='" + value + "']");
    if (!radio) return false;
    radio.checked = true;
    return press("answer");
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("[data-shortcut='help']")) toggleShortcuts();
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey) return;
    var target = event.target;
    if (typing(target)) {
      if (event.key === "Escape") {
        target.blur();
        event.preventDefault();
      } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && target.dataset.submit) {
        // Ctrl+Enter in the reason field sends it: reject (or, for questions, the answers).
        if (press(target.dataset.submit)) event.preventDefault();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey) return;
    var dialog = document.getElementById("shortcuts");
    if (dialog && dialog.open) {
      if (event.key === "?") {
        event.preventDefault();
        dialog.close();
      }
      return; // the dialog is modal: Escape and its button close it
    }
    var done;
    switch (event.key) {
      case "a":
        done = press("approve");
        break;
      case "r":
        done = focusField(find("reason"));
        break;
      case "y":
        done = answer("yes");
        break;
      case "n":
        done = answer("no") || press("next");
        break;
      case "e":
        done = focusField(find("arguments"));
        break;
      case "s":
        done = press("skip");
        break;
      case "?":
        toggleShortcuts();
        done = true;
        break;
      default:
        done = false;
    }
    if (done) event.preventDefault();
  });

  // After the action area is swapped in place, put the focus where the reviewer goes next:
  // the field a problem names (what they typed is still in it), the problems, or "Next".
  document.addEventListener("htmx:afterSettle", function (event) {
    var area = document.getElementById(AREA);
    if (!area || event.detail.target !== area) return;
    var target =
      area.querySelector("[aria-invalid='true']") ||
      area.querySelector("#decision-problems") ||
      area.querySelector("[autofocus]") ||
      area.querySelector(".closed, .held, .confirmation");
    if (!target) return;
    if (target.tabIndex < 0 && !target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    focusField(target);
    tick();
  });

  // The countdown is rendered on the server; this keeps it true while the page stays open.
  function span(seconds) {
    var minutes = Math.floor(Math.abs(seconds) / 60);
    if (minutes < 1) return "under a minute";
    if (minutes < 60) return minutes + " min";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return minutes ? hours + " h " + minutes + " min" : hours + " h";
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h" : days + " d";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (time) {
      var at = Date.parse(time.getAttribute("datetime"));
      if (isNaN(at)) return;
      var seconds = (at - now) / 1000;
      time.textContent = seconds >= 0 ? "in " + span(seconds) : "overdue by " + span(seconds);
      time.classList.toggle("overdue", seconds < 0);
    });
  }

  window.setInterval(tick, 30000);
})();
