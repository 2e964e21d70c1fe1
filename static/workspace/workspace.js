/* LeadOps workspace: the keyboard, the composer's conveniences and the
   messages an action sends back. Everything here only enhances: each page
   works with plain links and forms when this file does not run. */
(function () {
  "use strict";

  document.documentElement.classList.add("js");

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(target.tagName));
  }

  // ---------------------------------------------------------------- flash

  function flash(level, text) {
    var area = document.getElementById("flash");
    if (!area) return;
    var p = document.createElement("p");
    p.className = "flash flash-" + (level || "info");
    p.setAttribute("role", level === "error" ? "alert" : "status");
    p.textContent = text;
    area.appendChild(p);
    fade(p);
  }

  function fade(p) {
    setTimeout(function () { p.classList.add("is-gone"); }, 5000);
    setTimeout(function () { p.remove(); }, 5600);
  }

  document.querySelectorAll("#flash .flash").forEach(fade);

  // An action answered by the server (`HX-Trigger: workspace-flash`) says
  // what happened; a form that worked is emptied for the next one.
  document.body.addEventListener("workspace-flash", function (event) {
    var detail = event.detail || {};
    flash(detail.level, detail.text);
    var form = event.target && event.target.closest ? event.target.closest("form[data-reset]") : null;
    if (form && detail.level === "success") form.reset();
  });

  // ---------------------------------------------------------------- inbox

  var selected = null; // the selected row's lead id, kept across live refreshes

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#rows .row"));
  }

  function select(row, scroll) {
    rows().forEach(function (r) {
      r.classList.toggle("is-selected", r === row);
      // aria-current, not aria-selected: a list item of links has no selection state.
      if (r === row) r.setAttribute("aria-current", "true");
      else r.removeAttribute("aria-current");
    });
    selected = row ? row.dataset.lead : null;
    if (row && scroll) row.scrollIntoView({ block: "nearest" });
  }

  function current() {
    return rows().filter(function (r) { return r.dataset.lead === selected; })[0] || null;
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var at = all.indexOf(current());
    var next = at < 0 ? 0 : Math.min(all.length - 1, Math.max(0, at + step));
    select(all[next], true);
  }

  function reselect() {
    var row = current() || rows()[0] || null;
    select(row, false);
  }

  if (document.getElementById("rows")) reselect();

  document.addEventListener("click", function (event) {
    var row = event.target.closest && event.target.closest("#rows .row");
    if (!row || event.target.closest("a, button, form, input, select, textarea")) return;
    window.location.href = row.dataset.href;
  });

  document.body.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.id === "inbox-list") reselect();
    if (event.target && event.target.id === "composer-wrap") composerReady(true);
  });

  function inboxKeys(event) {
    var row = current();
    switch (event.key) {
      case "j": move(1); return true;
      case "k": move(-1); return true;
      case "Enter":
        if (event.target.tagName === "A") return false; // a focused link opens itself
        if (row) window.location.href = row.dataset.href;
        return !!row;
      case "r":
        // No fragment: a browser does not autofocus a page opened at one.
        if (row) window.location.href = row.dataset.href + "?reply=1";
        return !!row;
      case "e": {
        if (!row) return false;
        var form = row.querySelector(".done-form");
        if (form) form.requestSubmit();
        else flash("info", "Nothing is waiting on this conversation.");
        return true;
      }
      case "/": {
        var search = document.getElementById("search");
        if (search) search.focus();
        return !!search;
      }
    }
    return false;
  }

  // The filters apply as soon as one changes (the Apply button is the way without JavaScript).
  var filters = document.getElementById("filters");
  if (filters) {
    filters.addEventListener("change", function (event) {
      if (event.target.name !== "q") filters.requestSubmit();
    });
  }

  // ---------------------------------------------------------------- thread

  function composerReady(focus) {
    var composer = document.getElementById("composer");
    if (!composer) return;
    var body = composer.querySelector("textarea[name=body]");
    var channel = composer.querySelector("select[name=channel]");
    var picker = document.getElementById("template-picker");
    var key = composer.querySelector("input[name=template_key]");
    function channelChanged() {
      composer.classList.toggle("is-email", !!channel && channel.value === "email");
    }
    if (channel) {
      channel.addEventListener("change", channelChanged);
      channelChanged();
    }
    var chip = document.getElementById("suggestion-chip");
    var state = document.getElementById("picked-state");
    var picked = key && key.value ? body && body.value : null;
    var pickedKey = key ? key.value : "";
    function pick(text, templateKey) {
      if (!body) return;
      body.value = text || "";
      if (key) key.value = templateKey || "";
      picked = text || null;
      pickedKey = templateKey || "";
      say(picked ? "Approved text, unmodified." : "");
      body.focus();
    }
    function say(words) {
      if (!state) return;
      state.textContent = words;
      state.hidden = !words;
    }
    if (chip && body) {
      chip.addEventListener("click", function (event) {
        event.preventDefault();
        pick(chip.dataset.body, chip.dataset.key);
      });
    }
    if (picker && body) {
      picker.addEventListener("change", function () {
        var option = picker.options[picker.selectedIndex];
        pick(option.dataset.body, option.dataset.key);
      });
    }
    if (body) {
      body.addEventListener("keydown", function (event) {
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
          event.preventDefault();
          composer.requestSubmit();
        }
      });
      // Text the setter typed over a picked one is their own edit: it goes
      // as their words, which the claims guard reads, and says so.
      body.addEventListener("input", function () {
        if (picked === null) return;
        if (body.value !== picked) {
          if (key) key.value = "";
          if (picker) picker.value = "";
          say("Edited: your own words now, which the claims guard reads before they go.");
        } else {
          if (key) key.value = pickedKey;
          say("Approved text, unmodified.");
        }
      });
      if (focus) {
        body.focus();
        body.setSelectionRange(body.value.length, body.value.length);
        body.scrollIntoView({ block: "center" });
      }
    }
  }

  composerReady(/[?&](reply|template)=/.test(window.location.search));

  // At a phone's width the inbox's filters start folded: the conversations
  // come first, the filters one tap away.
  var fold = document.getElementById("filters-fold");
  if (fold && window.matchMedia("(max-width: 600px)").matches) fold.open = false;

  function threadKeys(event) {
    var composer = document.getElementById("composer");
    switch (event.key) {
      case "r": {
        var body = composer && composer.querySelector("textarea[name=body]");
        if (body) {
          body.focus();
          body.scrollIntoView({ block: "center" });
        }
        return !!body;
      }
      case "u": {
        var back = document.getElementById("back-to-inbox");
        if (back) window.location.href = back.href;
        return !!back;
      }
    }
    return false;
  }

  // ---------------------------------------------------------------- keys

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.metaKey || event.ctrlKey || event.altKey) return;
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    var handled = document.getElementById("rows") ? inboxKeys(event) : false;
    if (!handled && document.getElementById("composer-wrap")) handled = threadKeys(event);
    if (handled) event.preventDefault();
  });
})();
