// Every htmx swap says what it brought to a screen reader, and keeps the focus where the person
// was (issue 28). Loaded with defer from base.html's <head> (no inline script: the CSP).
//
// Announcing: one polite live region (#swap-status, visually hidden) lives on the page from
// the start, outside everything htmx swaps: a region that is itself replaced (an outerHTML
// swap) is not reliably read. After a swap it is given the text that sums up the new content,
// taken from the page (so it is in the page's language): the elements named by the swapped
// element's data-swap-summary (a CSS selector), else its [role=status], caption or first
// heading. A poll (hx-trigger "every …") speaks only when that text changed; an alert
// (role=alert) speaks for itself; and when a page's own script moved the focus into the new
// content (the decision pane), the focused element is read, so the region stays silent.
//
// Focus: when the focus was inside the swapped element (a "Next page" link, a button), the
// swap would drop it on <body>. After the swap it goes to the same element in the new content
// (same id, else the same place with the same tag and text), else to the swapped element
// itself (or where the swap scrolls to), unless a page's own script already put it somewhere.
(function () {
  "use strict";
  if (window.guardianSwaps) return; // a Back restore must not bind twice
  window.guardianSwaps = true;

  var REGION = "swap-status";
  var FALLBACK = "[role=status], caption, h1, h2, h3";

  function region() {
    var live = document.getElementById(REGION);
    if (live) return live;
    live = document.createElement("div");
    live.id = REGION;
    live.className = "visually-hidden";
    live.setAttribute("role", "status");
    live.setAttribute("aria-live", "polite");
    live.setAttribute("aria-atomic", "true");
    document.body.appendChild(live);
    return live;
  }

  function clean(text) {
    text = (text || "").replace(/\s+/g, " ").trim();
    return text.length > 300 ? text.slice(0, 297) + "…" : text;
  }

  // The text that sums up `element` (a swap's target), and whether it is an alert.
  function summary(element) {
    if (!element) return { text: "", alert: false };
    var alert = element.matches("[role=alert]") || !!element.querySelector("[role=alert]");
    var selector = element.getAttribute("data-swap-summary");
    var found = [];
    if (selector && element.matches(selector)) {
      found = [element];
    } else if (selector) {
      // Inside the element first, else anywhere on the page (counts swapped out of band).
      found = Array.prototype.slice.call(element.querySelectorAll(selector));
      if (!found.length) found = Array.prototype.slice.call(document.querySelectorAll(selector));
    } else if (element.matches(FALLBACK)) {
      found = [element];
    } else {
      var first = element.querySelector(FALLBACK);
      if (first) found = [first];
    }
    var text = found
      .filter(function (el) { return !el.hidden; })
      .map(function (el) { return clean(el.textContent); })
      .filter(Boolean)
      .join(". ");
    return { text: text, alert: alert };
  }

  function say(text) {
    var live = region();
    live.textContent = "";
    // Emptied first and filled a moment later, so the same words said twice are read twice.
    window.setTimeout(function () { live.textContent = text; }, 50);
  }

  function pathTo(root, element) {
    var path = [];
    while (element && element !== root) {
      var parent = element.parentElement;
      if (!parent) return null;
      path.unshift(Array.prototype.indexOf.call(parent.children, element));
      element = parent;
    }
    return element === root ? path : null;
  }

  function follow(root, path) {
    var element = root;
    for (var i = 0; element && i < path.length; i++) element = element.children[path[i]];
    return element || null;
  }

  function lost() {
    var active = document.activeElement;
    return !active || active === document.body || !active.isConnected;
  }

  var pending = null;

  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    if (!detail.shouldSwap || !detail.target) return;
    var target = detail.target;
    var elt = detail.requestConfig && detail.requestConfig.elt;
    var active = document.activeElement;
    var inside = active && active !== document.body && (active === target || target.contains(active));
    var shown = /show:(#[\w-]+)/.exec((elt && elt.getAttribute("hx-swap")) || "");
    pending = {
      target: target,
      shown: shown ? shown[1] : null,
      id: target.id,
      poll: !!(elt && /\bevery\b/.test(elt.getAttribute("hx-trigger") || "")),
      before: summary(target).text,
      focus: inside
        ? {
            id: active.id,
            path: active === target ? [] : pathTo(target, active),
            tag: active.tagName,
            text: clean(active.textContent)
          }
        : null
    };
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var kept = pending;
    if (!kept || event.detail.target !== kept.target) return;
    pending = null;
    // An outerHTML swap replaced the target: the new element is found by its id.
    var now = (kept.id && document.getElementById(kept.id)) || event.detail.target;
    if (!now || !now.isConnected) return;

    var moved = false;
    var restored = false;
    if (kept.focus && lost()) {
      var again = kept.focus.id ? document.getElementById(kept.focus.id) : null;
      if (!again && kept.focus.path) {
        var there = follow(now, kept.focus.path);
        if (there && there.tagName === kept.focus.tag && clean(there.textContent) === kept.focus.text) {
          again = there;
        }
      }
      if (!again) {
        // Else where the swap scrolls to (hx-swap "show:#id"), else the new content itself.
        again = (kept.shown && document.querySelector(kept.shown)) || now;
        if (again.tabIndex < 0 && !again.hasAttribute("tabindex")) again.setAttribute("tabindex", "-1");
      }
      again.focus({ preventScroll: true });
      moved = true;
    } else if (kept.focus) {
      // A page's script put the focus back: on the same control (its id) is the person's
      // place kept; anywhere else it led them to what the swap brought, which is read there.
      var active = document.activeElement;
      restored = !!(kept.focus.id && active && active.id === kept.focus.id);
    }

    // Swapped into a live region that stayed in place (innerHTML): the region reads it.
    if (now === kept.target && now.closest("[aria-live]")) return;
    var said = summary(now);
    if (said.alert || !said.text) return;
    if (kept.poll && said.text === kept.before) return;
    // A page's script led the focus into the new content: it is read there.
    var focused = document.activeElement;
    if (!moved && !restored && focused && focused !== now && now.contains(focused)) return;
    say(said.text);
  });

  function ready() {
    region();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  document.addEventListener("htmx:historyRestore", ready);
})();
