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
  //
  // The words are the person's language: Django's catalogue (/jsi18n/, loaded deferred before
  // this script, from locale/*/LC_MESSAGES/djangojs.po) gives gettext and ngettext. Each
  // message is a whole sentence with named placeholders, as word order differs between
  // languages; without the catalogue the words stay English.
  var gettext = window.gettext || function (msgid) { return msgid; };
  var ngettext = window.ngettext || function (one, many, n) { return n === 1 ? one : many; };

  // A translated sentence as text parts: each %(name)s becomes values[name], a string or a
  // list of parts, where a tool name (data from a run) is { bdi: name }. The sentence is split
  // around its placeholders, so run data is never read as a format nor as HTML (fill() sets
  // it as text, each tool name in a <bdi> of its own).
  function phrase(format, values) {
    var parts = [];
    format.split(/(%\(\w+\)s)/).forEach(function (piece, i) {
      if (i % 2 === 0) {
        if (piece) parts.push(piece);
        return;
      }
      var value = values[piece.slice(2, -2)];
      parts = parts.concat(value === undefined ? [piece] : value);
    });
    return parts;
  }

  // Items (each a string, a { bdi } or a list of parts) joined by `format` ("%(list)s and
  // %(item)s"), one at a time: "a and b and c".
  function joined(format, items) {
    return items.reduce(function (list, item) {
      return list === null ? [].concat(item) : phrase(format, { list: list, item: item });
    }, null) || [];
  }

  function bdis(tools) {
    return tools.map(function (tool) { return { bdi: tool }; });
  }

  // What a bulk decision asks and what it then does, for each kind, with n items decided
  // together; what each decision does is escalation_resolve's docstring. %(tools)s is the
  // held tool; a kind that is not here can be rejected but not approved.
  var BULK_WORDS = {
    gated_step: {
      approve: function (n) {
        return {
          question: ngettext(
            "Approve %(count)s held %(tools)s call?",
            "Approve %(count)s held %(tools)s calls?",
            n
          ),
          then: ngettext("It will run.", "They will run.", n)
        };
      },
      reject: function (n) {
        return {
          question: ngettext(
            "Reject %(count)s held %(tools)s call?",
            "Reject %(count)s held %(tools)s calls?",
            n
          ),
          then: ngettext(
            "It will not run; the agent gets your reason and proposes again.",
            "They will not run; each agent gets your reason and proposes again.",
            n
          )
        };
      }
    },
    ambiguous_call: {
      approve: function (n) {
        return {
          question: ngettext(
            "Approve %(count)s ambiguous %(tools)s call?",
            "Approve %(count)s ambiguous %(tools)s calls?",
            n
          ),
          then: ngettext(
            "It is recorded as having gone through; its run goes on.",
            "Each is recorded as having gone through; their runs go on.",
            n
          )
        };
      },
      reject: function (n) {
        return {
          question: ngettext(
            "Reject %(count)s ambiguous %(tools)s call?",
            "Reject %(count)s ambiguous %(tools)s calls?",
            n
          ),
          then: ngettext(
            "It is recorded as not done; its run stops.",
            "Each is recorded as not done; their runs stop.",
            n
          )
        };
      }
    },
    review_loop: {
      approve: function (n) {
        return {
          question: ngettext(
            "Approve %(count)s coder/reviewer loop?",
            "Approve %(count)s coder/reviewer loops?",
            n
          ),
          then: ngettext(
            "The coder's last code becomes the run's answer.",
            "In each, the coder's last code becomes the run's answer.",
            n
          )
        };
      },
      reject: function (n) {
        return {
          question: ngettext(
            "Reject %(count)s coder/reviewer loop?",
            "Reject %(count)s coder/reviewer loops?",
            n
          ),
          then: ngettext("Its run stops.", "Their runs stop.", n)
        };
      }
    }
  };
  // Any other kind, named by its label (%(label)s): it can be rejected, not approved.
  var OTHER_WORDS = {
    approve: function (n) {
      return {
        question: ngettext(
          "Approve %(count)s escalation (%(label)s)?",
          "Approve %(count)s escalations (%(label)s)?",
          n
        ),
        then: null
      };
    },
    reject: function (n) {
      return {
        question: ngettext(
          "Reject %(count)s escalation (%(label)s)?",
          "Reject %(count)s escalations (%(label)s)?",
          n
        ),
        then: ngettext("Its run stops.", "Their runs stop.", n)
      };
    }
  };
  // Items holding more than one tool, whatever their kind: the question names them all.
  var SEVERAL_TOOLS = {
    approve: function (n) {
      return ngettext(
        "Approve %(count)s held step calling %(tools)s?",
        "Approve %(count)s held steps calling %(tools)s?",
        n
      );
    },
    reject: function (n) {
      return ngettext(
        "Reject %(count)s held step calling %(tools)s?",
        "Reject %(count)s held steps calling %(tools)s?",
        n
      );
    }
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
    var kind = row.getAttribute("data-kind-label");
    if (!tools.length) return phrase(gettext("%(kind)s with no tool"), { kind: kind });
    return phrase(gettext("%(kind)s holding %(tools)s"), {
      kind: kind,
      // Translators: a list of tool names, "a, b, c", built one name at a time.
      tools: joined(gettext("%(list)s, %(item)s"), bdis(tools))
    });
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

  function apartParts(row, first) {
    return phrase(gettext("#%(number)s (%(item)s) cannot go with #%(first_number)s (%(first)s)"), {
      number: row.getAttribute("data-escalation-id"),
      item: describe(row),
      first_number: first.getAttribute("data-escalation-id"),
      first: describe(first)
    });
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
    var apart = selection.apart.length;
    var then = gettext("Each gets its own verdict.");
    if (apart) {
      var clauses = selection.apart.map(function (row) {
        return apartParts(row, selection.first);
      });
      then = phrase(
        ngettext("%(apart)s; it would be left open.", "%(apart)s; they would be left open.", apart),
        // Translators: items that cannot be decided together, "a; b; c", one at a time.
        { apart: joined(gettext("%(list)s; %(item)s"), clauses) }
      );
    }
    fill(
      said,
      phrase(
        ngettext(
          "%(count)s selected: %(first)s. %(then)s",
          "%(count)s selected: %(first)s. %(then)s",
          count
        ),
        { count: String(count), first: describe(selection.first), then: then }
      )
    );
  }

  document.addEventListener("change", function (event) {
    if (event.target.classList && event.target.classList.contains("queue-pick")) showSelection();
  });
  document.addEventListener("htmx:afterSettle", showSelection);

  // htmx asks before posting the bulk form (its hx-confirm); this answers with a dialog on
  // the page that names how many items, which tool and what will happen. Calling
  // issueRequest(true) sends the request htmx held back, without asking again.
  var pending = null;

  // The question ("Approve 2 held issue_refund calls?") as text parts, and what will happen.
  function asked(row, decision, n) {
    var said = (BULK_WORDS[row.getAttribute("data-kind")] || OTHER_WORDS)[decision](n);
    var tools = toolsOf(row);
    var question = tools.length > 1 ? SEVERAL_TOOLS[decision](n) : said.question;
    return {
      question: phrase(question, {
        count: String(n),
        label: row.getAttribute("data-kind-label"),
        // Translators: the tools a held step calls, "a and b", one name at a time.
        tools: joined(gettext("%(list)s and %(item)s"), bdis(tools))
      }),
      then: said.then
    };
  }

  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt;
    var dialog = document.getElementById("bulk-confirm");
    var submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    if (!form || form.id !== "queue-bulk" || !dialog || !submitter) return;
    event.preventDefault();
    var decision = submitter.value === "approve" ? "approve" : "reject";
    var selection = plan();
    var reason = document.getElementById("bulk-reason");
    if (!selection || (decision === "reject" && reason && !reason.value.trim())) {
      // Nothing would be decided: the server names what is missing, no question needed.
      event.detail.issueRequest(true);
      return;
    }
    var n = selection.together.length;
    var said = asked(selection.first, decision, n);
    var then = said.then;
    fill(document.getElementById("bulk-confirm-question"), said.question);
    var detail = document.getElementById("bulk-confirm-detail");
    if (then && decision === "reject") {
      // Set as text: the reason is the reviewer's own words.
      detail.textContent = phrase(gettext("%(then)s Reason: “%(reason)s”."), {
        then: then,
        reason: reason.value.trim()
      }).join("");
    } else if (then) {
      detail.textContent = then;
    } else {
      detail.textContent = gettext(
        "These cannot be approved: only held steps, ambiguous calls and coder/reviewer loops " +
          "can. Open each to answer its question."
      );
    }
    var apart = document.getElementById("bulk-confirm-apart");
    apart.textContent = "";
    selection.apart.forEach(function (row) {
      var item = document.createElement("li");
      fill(item, phrase(gettext("%(apart)s; it stays open."), { apart: apartParts(row, selection.first) }));
      apart.appendChild(item);
    });
    apart.hidden = !selection.apart.length;
    var yes = document.getElementById("bulk-confirm-yes");
    yes.hidden = !then;
    yes.className = decision;
    yes.textContent = phrase(
      decision === "approve"
        ? ngettext("Approve %(count)s", "Approve %(count)s", n)
        : ngettext("Reject %(count)s", "Reject %(count)s", n),
      { count: String(n) }
    ).join("");
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
