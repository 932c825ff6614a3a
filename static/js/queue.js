// The reviewers' queue: keyboard shortcuts, and keeping the reviewer's place (focus, scroll,
// ticked items) when the live poll swaps the rows. Loaded with defer from <head>; the page
// works without it, and no inline script or hx-on is needed (the CSP allows neither).
(function () {
  "use strict";
  if (window.guardianQueue) return; // a Back restore must not bind the keys twice
  window.guardianQueue = true;

  var ROW = ".queue-row";

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll(ROW));
  }

  function currentRow() {
    var active = document.activeElement;
    return active && active.closest ? active.closest(ROW) : null;
  }

  function typing(target) {
    if (!target || !target.closest) return false;
    return !!target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']");
  }

  function focusRow(row) {
    if (!row) return;
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var index = all.indexOf(currentRow());
    var next = index < 0 ? (step > 0 ? 0 : all.length - 1) : index + step;
    focusRow(all[Math.max(0, Math.min(all.length - 1, next))]);
  }

  function shortcuts() {
    return document.getElementById("queue-shortcuts");
  }

  function toggleShortcuts() {
    var dialog = shortcuts();
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest(".queue-shortcuts-open")) toggleShortcuts();
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event.target)) return;
    var dialog = shortcuts();
    if (dialog && dialog.open) {
      if (event.key === "?") {
        event.preventDefault();
        dialog.close();
      }
      return; // the dialog is modal: Escape and its button close it
    }
    var row = currentRow();
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "Enter":
        // On the row itself; on a link or a checkbox inside it, Enter keeps its own meaning.
        if (!row || event.target !== row) return;
        var open = row.querySelector(".queue-open");
        if (open) open.click();
        break;
      case "n":
        var next = document.getElementById("queue-next");
        if (!next) return;
        if (next.requestSubmit) next.requestSubmit();
        else next.submit();
        break;
      case "x":
        var pick = row && row.querySelector(".queue-pick");
        if (!pick) return;
        pick.checked = !pick.checked;
        pick.dispatchEvent(new Event("change", { bubbles: true }));
        break;
      case "/":
        var filter = document.getElementById("filter-kind");
        if (!filter) return;
        filter.focus();
        break;
      case "?":
        toggleShortcuts();
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  // Before a swap of the rows (the live poll) or of the whole listing (a filter), remember
  // which row had focus, which were ticked and which row sat where on screen; put them back
  // after, so an update never throws the reviewer out of their place.
  var kept = null;

  function swapsQueue(target) {
    return target && (target.id === "queue-rows" || target.id === "queue-listing");
  }

  function anchorOf(row, all) {
    var anchor = row;
    if (!anchor) {
      anchor = all.find(function (r) {
        return r.getBoundingClientRect().bottom > 0;
      });
    }
    if (!anchor) return null;
    return { id: anchor.getAttribute("data-escalation-id"), top: anchor.getBoundingClientRect().top };
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!event.detail.shouldSwap || !swapsQueue(event.detail.target)) return;
    var row = currentRow();
    var all = rows();
    var active = document.activeElement;
    kept = {
      id: row ? row.getAttribute("data-escalation-id") : null,
      index: row ? all.indexOf(row) : -1,
      // A control inside the row (its checkbox, its link) is found again by its class.
      part: row && active !== row ? ["queue-pick", "queue-open"].find(function (name) {
        return active.classList.contains(name);
      }) || null : null,
      control: active && active.id && !row ? active.id : null,
      picked: all
        .filter(function (r) {
          var pick = r.querySelector(".queue-pick");
          return pick && pick.checked;
        })
        .map(function (r) {
          return r.getAttribute("data-escalation-id");
        }),
      // The row the reviewer reads (the focused one, else the first in view) and where it
      // sits on screen: after the swap the page scrolls so it sits there again, whatever
      // arrived above it or left.
      anchor: anchorOf(row, all),
    };
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    if (!kept || !swapsQueue(event.detail.target)) return;
    var state = kept;
    kept = null;
    state.picked.forEach(function (id) {
      var pick = document.querySelector(ROW + "[data-escalation-id='" + id + "'] .queue-pick");
      if (pick) pick.checked = true;
    });
    if (state.id !== null) {
      var row = document.querySelector(ROW + "[data-escalation-id='" + state.id + "']");
      if (!row) {
        // The focused item left (decided, or filtered out): the one now in its place.
        var all = rows();
        row = all[Math.min(state.index, all.length - 1)] || null;
      }
      var again = row && state.part ? row.querySelector("." + state.part) : row;
      if (again && document.activeElement !== again) again.focus({ preventScroll: true });
    } else if (state.control) {
      var control = document.getElementById(state.control);
      if (control && document.activeElement !== control) control.focus({ preventScroll: true });
    }
    if (state.anchor) {
      var anchor = document.querySelector(ROW + "[data-escalation-id='" + state.anchor.id + "']");
      if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - state.anchor.top);
    }
  });
})();
