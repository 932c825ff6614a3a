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
    if (target.isContentEditable) return true;
    return !!target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']");
  }

  // A person can turn the single-key shortcuts off (WCAG 2.1.4): the page then says
  // <body data-keyboard-shortcuts="off">, read at each key so a change needs no reload.
  function shortcutsOff() {
    return !!document.body && document.body.dataset.keyboardShortcuts === "off";
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
    if (shortcutsOff() || typing(event.target)) return;
    var dialog = shortcuts();
    if (dialog && dialog.open) {
      if (event.key === "?") {
        event.preventDefault();
        dialog.close();
      }
      return; // the dialog is modal: Escape and its button close it
    }
    if (document.querySelector("dialog[open]")) return; // the bulk confirmation has the keys
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

  // ---- Bulk decisions: say what the ticks add up to, and ask before deciding ---------------
  // Only items of one kind holding the same tools are decided together (the server checks;
  // escalation_resolve_bulk): the first ticked sets the kind, the others must match it.

  // How a bulk verdict reads for each kind, [one, many]; what each decision does is
  // escalation_resolve's docstring. A kind that is not here can be rejected but not approved.
  var BULK_WORDS = {
    gated_step: {
      noun: ["held {tools} call", "held {tools} calls"],
      approve: ["It will run.", "They will run."],
      reject: [
        "It will not run; the agent gets your reason and proposes again.",
        "They will not run; each agent gets your reason and proposes again."
      ]
    },
    ambiguous_call: {
      noun: ["ambiguous {tools} call", "ambiguous {tools} calls"],
      approve: [
        "It is recorded as having gone through; its run goes on.",
        "Each is recorded as having gone through; their runs go on."
      ],
      reject: ["It is recorded as not done; its run stops.", "Each is recorded as not done; their runs stop."]
    },
    review_loop: {
      noun: ["coder/reviewer loop", "coder/reviewer loops"],
      approve: ["The coder's last code becomes the run's answer.", "In each, the coder's last code becomes the run's answer."],
      reject: ["Its run stops.", "Their runs stop."]
    }
  };
  var OTHER_WORDS = {
    noun: ["escalation ({label})", "escalations ({label})"],
    approve: null,
    reject: ["Its run stops.", "Their runs stop."]
  };

  function picked() {
    return rows().filter(function (r) {
      var pick = r.querySelector(".queue-pick");
      return pick && pick.checked;
    });
  }

  function groupOf(row) {
    return row.getAttribute("data-kind") + "|" + row.getAttribute("data-tools");
  }

  function toolsOf(row) {
    return (row.getAttribute("data-tools") || "").split(",").filter(Boolean);
  }

  // "Irreversible or regulated step holding issue_refund", as text parts; a tool name is
  // data from a run, so it is kept apart in a <bdi> and only ever set as text.
  function describe(row) {
    var tools = toolsOf(row);
    var parts = [row.getAttribute("data-kind-label") + (tools.length ? " holding " : " with no tool")];
    tools.forEach(function (tool, i) {
      if (i) parts.push(", ");
      parts.push({ bdi: tool });
    });
    return parts;
  }

  function fill(element, parts) {
    element.textContent = "";
    parts.forEach(function (part) {
      if (typeof part === "string") element.appendChild(document.createTextNode(part));
      else {
        var bdi = document.createElement("bdi");
        bdi.textContent = part.bdi;
        element.appendChild(bdi);
      }
    });
  }

  function plan() {
    var chosen = picked();
    if (!chosen.length) return null;
    var key = groupOf(chosen[0]);
    return {
      first: chosen[0],
      together: chosen.filter(function (r) { return groupOf(r) === key; }),
      apart: chosen.filter(function (r) { return groupOf(r) !== key; })
    };
  }

  function number(row) {
    return "#" + row.getAttribute("data-escalation-id");
  }

  function apartParts(row, first) {
    return [number(row) + " ("].concat(describe(row), [") cannot go with " + number(first) + " ("], describe(first), [")"]);
  }

  // Under the bulk buttons, what the ticks add up to; it warns before anything is sent.
  function showSelection() {
    var said = document.getElementById("bulk-selection");
    var hint = document.getElementById("bulk-hint");
    if (!said) return;
    var selection = plan();
    said.hidden = !selection;
    if (hint) hint.hidden = !!selection;
    said.classList.toggle("mixed", !!(selection && selection.apart.length));
    if (!selection) {
      said.textContent = "";
      return;
    }
    var count = selection.together.length + selection.apart.length;
    var parts = [count + " selected: "].concat(describe(selection.first), [". "]);
    selection.apart.forEach(function (row) {
      parts = parts.concat(apartParts(row, selection.first), ["; "]);
    });
    if (selection.apart.length) {
      parts.push(selection.apart.length === 1 ? "it would be left open." : "they would be left open.");
    } else {
      parts.push("Each gets its own verdict.");
    }
    fill(said, parts);
  }

  document.addEventListener("change", function (event) {
    if (event.target.classList && event.target.classList.contains("queue-pick")) showSelection();
  });
  document.addEventListener("htmx:afterSettle", showSelection);

  // htmx asks before posting the bulk form (its hx-confirm); this answers with a dialog on
  // the page that names how many items, which tool and what will happen. Calling
  // issueRequest(true) sends the request htmx held back, without asking again.
  var pending = null;

  function words(row) {
    return BULK_WORDS[row.getAttribute("data-kind")] || OTHER_WORDS;
  }

  function nounFor(row, many) {
    var tools = toolsOf(row);
    var noun = words(row).noun[many ? 1 : 0];
    if (tools.length > 1) noun = many ? "held steps calling {tools}" : "held step calling {tools}";
    var label = row.getAttribute("data-kind-label");
    // Split around {tools} so that the tool names go into <bdi> as text.
    var pieces = noun.replace("{label}", label).split("{tools}");
    var parts = [pieces[0]];
    if (pieces.length > 1) {
      tools.forEach(function (tool, i) {
        if (i) parts.push(" and ");
        parts.push({ bdi: tool });
      });
      parts.push(pieces[1]);
    }
    return parts;
  }

  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt;
    var dialog = document.getElementById("bulk-confirm");
    var submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    if (!form || form.id !== "queue-bulk" || !dialog || !submitter) return;
    event.preventDefault();
    var decision = submitter.value;
    var selection = plan();
    var reason = document.getElementById("bulk-reason");
    if (!selection || (decision === "reject" && reason && !reason.value.trim())) {
      // Nothing would be decided: the server names what is missing, no question needed.
      event.detail.issueRequest(true);
      return;
    }
    var many = selection.together.length !== 1;
    var said = words(selection.first);
    var verb = decision === "approve" ? "Approve" : "Reject";
    var then = said[decision];
    fill(
      document.getElementById("bulk-confirm-question"),
      [verb + " " + selection.together.length + " "].concat(nounFor(selection.first, many), ["?"])
    );
    var detail = document.getElementById("bulk-confirm-detail");
    if (then) {
      detail.textContent = then[many ? 1 : 0];
      if (decision === "reject") detail.textContent += " Reason: “" + reason.value.trim() + "”.";
    } else {
      detail.textContent =
        "These cannot be approved: only held steps, ambiguous calls and coder/reviewer loops can. " +
        "Open each to answer its question.";
    }
    var apart = document.getElementById("bulk-confirm-apart");
    apart.textContent = "";
    selection.apart.forEach(function (row) {
      var item = document.createElement("li");
      fill(item, apartParts(row, selection.first).concat(["; it stays open."]));
      apart.appendChild(item);
    });
    apart.hidden = !selection.apart.length;
    var yes = document.getElementById("bulk-confirm-yes");
    yes.hidden = !then;
    yes.className = decision;
    yes.textContent = verb + " " + selection.together.length;
    pending = { submitter: submitter, issueRequest: event.detail.issueRequest };
    dialog.returnValue = "";
    dialog.showModal();
    (then ? yes : dialog.querySelector(".cancel")).focus();
  });

  document.addEventListener(
    "close",
    function (event) {
      if (!event.target || event.target.id !== "bulk-confirm") return;
      var held = pending;
      pending = null;
      if (!held || event.target.returnValue !== "confirm") return; // Cancel or Escape
      // htmx sends the value of the button it last saw focused or clicked; the dialog took
      // the focus away, so give it back to the button that asked before sending.
      held.submitter.focus();
      held.issueRequest(true);
    },
    true // close does not bubble
  );
})();
