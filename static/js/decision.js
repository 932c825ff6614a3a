// The decision pane's keyboard shortcuts, its focus after an in-place answer, and its deadline
// countdown. Loaded with defer from <head>; every action also works without it (plain forms),
// and it needs no inline script, hx-on or trigger filter (the CSP and allowEval=false forbid
// them). Keys act only while no text field has focus; Escape leaves a field. None act when the
// person turned the shortcuts off (<body data-keyboard-shortcuts="off">).
//
// One key sends a verdict only where the issue asks for it (a: approve). y and n only select
// an answer, and Enter on it sends it: n is also "next item" on the queue, and a reviewer who
// pressed n twice must not have answered "no" to an injected output without seeing it.
(function () {
  "use strict";
  if (window.guardianDecision) return; // a Back restore must not bind the keys twice
  window.guardianDecision = true;

  var AREA = "decision-area";
  // A key typed while the next item loads must not act on it unseen (a skip has no undo):
  // shortcuts are ignored while a request of this page is in flight, while the page is being
  // left, and for SETTLE_MS after new content appears (a page load, an htmx swap).
  var SETTLE_MS = 700;
  var inFlight = 0;
  var leaving = false;
  var quietUntil = 0;

  function settled() {
    quietUntil = Date.now() + SETTLE_MS;
  }

  function quiet() {
    return inFlight > 0 || leaving || Date.now() < quietUntil;
  }

  // For the browser tests (and anyone curious): whether keys are ignored right now.
  window.guardianDecisionQuiet = quiet;
  settled(); // this script runs as the page appears (deferred): the item is new to the reviewer
  window.addEventListener("pageshow", function () {
    leaving = false;
    settled();
  });
  // A plain form post or a link away: the page is going, its keys with it.
  window.addEventListener("beforeunload", function () {
    leaving = true;
  });
  document.addEventListener("htmx:beforeRequest", function () {
    inFlight += 1;
  });
  document.addEventListener("htmx:afterRequest", function () {
    inFlight = Math.max(0, inFlight - 1);
    settled();
  });
  document.addEventListener("htmx:afterSettle", settled);
  // Inputs that take no typed text; every other input (text, number, date, time…) does.
  var NOT_TEXT_TYPES = ["checkbox", "radio", "button", "submit", "reset", "image", "file", "range", "color"];
  var KEYS = ["a", "r", "y", "n", "e", "s", "?", "Enter", "0", "1", "2", "3", "4"];

  function typing(target) {
    if (!target || !target.tagName) return false;
    if (target.isContentEditable) return true;
    var tag = target.tagName.toLowerCase();
    if (tag === "textarea" || tag === "select") return true;
    // A checkbox or a radio button takes no text: the shortcuts still work on it.
    return tag === "input" && NOT_TEXT_TYPES.indexOf((target.type || "text").toLowerCase()) < 0;
  }

  // A person can turn the single-key shortcuts off (WCAG 2.1.4): the page then says
  // <body data-keyboard-shortcuts="off">, read at each key so a change needs no reload.
  function shortcutsOff() {
    return !!document.body && document.body.dataset.keyboardShortcuts === "off";
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

  // Where the focus was before the shortcuts opened, to put it back when they close. An htmx
  // swap may have replaced that element meanwhile: then its namesake (same id) takes it.
  var opener = null;

  function toggleShortcuts() {
    var dialog = document.getElementById("shortcuts");
    if (!dialog) return;
    if (dialog.open) {
      dialog.close();
      return;
    }
    opener = document.activeElement;
    dialog.showModal();
  }

  function restoreFocus(dialog) {
    var back = opener;
    opener = null;
    // The close event is handled as a task of its own: the focus may already be somewhere
    // outside the dialog by then (the browser's own restore, or the reviewer moved on), and
    // taking it from there would lose the reviewer's place.
    var now = document.activeElement;
    if (now && now !== document.body && !dialog.contains(now)) return;
    if (!back || back === document.body) return;
    if (!back.isConnected) back = back.id ? document.getElementById(back.id) : null;
    if (back) back.focus();
  }

  // Whether the reviewer still has something to decide here: until then n selects "no".
  function decisionOpen() {
    return !!document.getElementById("decision-form");
  }

  // y / n (and 0-4 for a drift score) select, never send, the answer of the question the
  // focus is in, or of the first question still unanswered; the focus moves to the chosen
  // answer, where Enter sends it.
  function select(value) {
    var form = document.getElementById("decision-form");
    if (!form) return false;
    var active = document.activeElement;
    var question = active && active.closest ? active.closest("#decision-form .question") : null;
    if (!question) {
      // Not in a question: the first one still unanswered (Tab moves on to the next).
      var questions = Array.prototype.slice.call(form.querySelectorAll(".question"));
      question = questions.filter(function (q) {
        return !q.querySelector("input[type='radio']:checked");
      })[0] || (questions.length === 1 ? questions[0] : null);
      if (!question) return false;
    }
    var radio = question.querySelector("input[data-answer='" + value + "']");
    if (!radio) return false;
    radio.checked = true;
    radio.dispatchEvent(new Event("change", { bubbles: true }));
    radio.focus();
    radio.scrollIntoView({ block: "nearest" });
    return true;
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("[data-shortcut='help']")) toggleShortcuts();
  });

  // However the dialog closes (Escape, its button, ?), the focus goes back where it was.
  document.addEventListener(
    "close",
    function (event) {
      if (event.target && event.target.id === "shortcuts") restoreFocus(event.target);
    },
    true // close does not bubble
  );

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey || shortcutsOff()) return;
    var target = event.target;
    if (typing(target)) {
      if (event.key === "Escape") {
        // Out of the field, so the keys work again; the focus stays in the form (not on the
        // page's body, where it would vanish), and the next Tab goes on from there.
        var home = target.form && target.form.hasAttribute("tabindex") ? target.form : null;
        if (home) home.focus();
        else target.blur();
        event.preventDefault();
      } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && target.dataset.submit) {
        // Ctrl+Enter in the reason field rejects, on every kind of item (never the answers).
        if (press(target.dataset.submit)) event.preventDefault();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey) return;
    // A key held down repeats: it must not go on to decide what the first press opened.
    if (event.repeat) {
      if (KEYS.indexOf(event.key) >= 0) event.preventDefault();
      return;
    }
    if (quiet() && KEYS.indexOf(event.key) >= 0 && event.key !== "?") {
      // Loading or just loaded: the reviewer has not seen what the key would act on.
      event.preventDefault();
      return;
    }
    var dialog = document.getElementById("shortcuts");
    if (dialog && dialog.open) {
      if (event.key === "?") {
        event.preventDefault();
        dialog.close();
      }
      return; // the dialog is modal: Escape and its button close it
    }
    var done;
    if (event.key === "Enter") {
      // Enter on a chosen answer sends the answers (the form's own default button is disabled,
      // so that Enter on a held call's checkbox never approves it).
      if (target.matches && target.matches("#decision-form .question input[type='radio']")) {
        if (press("answer")) event.preventDefault();
      }
      return;
    }
    switch (event.key) {
      case "a":
        done = press("approve");
        break;
      case "r":
        done = focusField(find("reason"));
        break;
      case "y":
        done = select("yes");
        break;
      case "n":
        // "Next item" only once nothing is left to decide here; before that, n never leaves
        // the item nor answers it.
        done = decisionOpen() ? select("no") : press("next");
        break;
      case "0":
      case "1":
      case "2":
      case "3":
      case "4":
        // A drift score, in the drift question (the one the focus is in, or the first open).
        done = decisionOpen() && select(event.key);
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
  // the first field a problem names (what they typed is still in it), the problems, or "Next".
  // The swap is outerHTML, so the element htmx names as its target (event.detail.target) is
  // the old, detached area: the new one is looked up again by its id.
  document.addEventListener("htmx:afterSettle", function (event) {
    var area = document.getElementById(AREA);
    if (!area || event.target !== area) return;
    var target =
      area.querySelector("[aria-invalid='true']") ||
      area.querySelector("#decision-problems") ||
      area.querySelector("[autofocus]") ||
      area.querySelector(".notice, .closed, .held, .confirmation");
    if (!target) return;
    if (target.type === "radio" && !target.checked) {
      // In a question's group, the answer already chosen is the one to come back to.
      var group = area.querySelectorAll("input[type='radio'][name='" + target.name + "']");
      for (var i = 0; i < group.length; i++) if (group[i].checked) target = group[i];
    }
    if (target.tabIndex < 0 && !target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    var problems = area.querySelector("#decision-problems");
    if (problems && target !== problems) {
      // The summary says what is wrong: it must be on screen when the focus lands on the
      // field. Both in view: the summary at the top, the focus on the field. The field too far
      // below for both: the focus on the summary, whose links lead to each field.
      var details = target.closest("details");
      if (details) details.open = true;
      problems.scrollIntoView({ block: "start" });
      var bottom = target.getBoundingClientRect().bottom;
      if (bottom > window.innerHeight) {
        if (problems.tabIndex < 0 && !problems.hasAttribute("tabindex")) problems.setAttribute("tabindex", "-1");
        problems.focus({ preventScroll: true });
      } else {
        target.focus({ preventScroll: true });
      }
    } else {
      focusField(target);
    }
    tick();
  });

  // The countdown is rendered on the server; this keeps it true while the page stays open, in
  // the page's language (Django's catalogue, /jsi18n/, loaded before this script; without it,
  // English). The same words as the server's (escalations/presentation.py).
  var gettext = window.gettext || function (msgid) { return msgid; };
  var interpolate =
    window.interpolate ||
    function (format, values) {
      return format.replace(/%\(\w+\)s/g, function (name) {
        return String(values[name.slice(2, -2)]);
      });
    };

  function span(seconds) {
    var minutes = Math.floor(Math.abs(seconds) / 60);
    if (minutes < 1) return gettext("under a minute");
    if (minutes < 60) return interpolate(gettext("%(minutes)s min"), { minutes: minutes }, true);
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) {
      if (minutes) return interpolate(gettext("%(hours)s h %(minutes)s min"), { hours: hours, minutes: minutes }, true);
      return interpolate(gettext("%(hours)s h"), { hours: hours }, true);
    }
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    // Translators: "d" is the abbreviation of days (French: "j").
    if (hours) return interpolate(gettext("%(days)s d %(hours)s h"), { days: days, hours: hours }, true);
    // Translators: "d" is the abbreviation of days (French: "j").
    return interpolate(gettext("%(days)s d"), { days: days }, true);
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (time) {
      var at = Date.parse(time.getAttribute("datetime"));
      if (isNaN(at)) return;
      var seconds = (at - now) / 1000;
      var said = seconds >= 0 ? gettext("in %(span)s") : gettext("overdue by %(span)s");
      time.textContent = interpolate(said, { span: span(seconds) }, true);
      time.classList.toggle("overdue", seconds < 0);
    });
  }

  window.setInterval(tick, 30000);
})();
