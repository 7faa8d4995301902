// The page of `agentr1-core view`: renders the JSON embedded in #view-data (built by agentr1_core/lifecycle/view.py).
// Every text that comes from a run (model output, tool output, tasks, config) goes into the page through text
// nodes, never as markup. Tables are paged (50 rows) and an episode is rendered only when it is opened. Every episode
// has its own link, #episode-N; without one the page opens D.start (the first held-out task that changed). In a wide
// window the episode pane stands beside the tables and stays in view (the page's CSS decides: #layout is a grid);
// in a narrow one it comes after them, and the header's "episode" link, which names the open episode, leads to it.
// A number the run's files wrote as NaN or Infinity arrives as that word (JSON has no such numbers) and shows as it.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("view-data").textContent);
  var PAGE = 50;
  var COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#57606a"];
  var SVGNS = "http://www.w3.org/2000/svg";
  var byIndex = D.episodes;  // episode i is D.episodes[i]
  var NONFINITE = ["NaN", "Infinity", "-Infinity"];

  // an interned text (task, added prompt lines): its index in D.strings when long, else the text itself
  function txt(v) { return typeof v === "number" ? D.strings[v] : (v == null ? "" : String(v)); }
  function str(v) { return v == null ? "" : typeof v === "string" ? v : JSON.stringify(v); }

  function el(tag, attrs) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function setAttrs(e, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (k === "class") e.setAttribute("class", v);
      else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
    });
  }
  function add(parent, kid) {
    if (kid == null || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach(function (k) { add(parent, k); }); return; }
    parent.appendChild(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
  }
  function svg(tag, attrs) { var e = document.createElementNS(SVGNS, tag); setAttrs(e, attrs); return e; }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function fmt(v, digits) {
    if (NONFINITE.indexOf(v) >= 0) return v;
    if (!isNum(v)) return "-";
    if (digits == null) digits = 3;
    if (Math.abs(v) >= 1000) return v.toFixed(0);
    return Number(v.toFixed(digits)).toString();
  }
  function tick(v, span) {  // enough digits to tell the ticks of a span apart
    var digits = Math.max(0, Math.ceil(-Math.log10(span / 3)) + 1);
    if (Math.abs(v) >= 1000) return v.toFixed(0);
    return digits > 5 ? v.toExponential(1) : Number(v.toFixed(digits)).toString();
  }
  function pct(v) { return NONFINITE.indexOf(v) >= 0 ? v : isNum(v) ? (100 * v).toFixed(1) + "%" : "-"; }
  function bytes(n) {
    if (!isFinite(n)) return "?";
    return n >= 1048576 ? (n / 1048576).toFixed(1) + " MB" : n >= 1024 ? (n / 1024).toFixed(0) + " KB" : n + " B";
  }
  function short(text, n) { text = String(text).replace(/\s+/g, " ").trim(); return text.length > n ? text.slice(0, n - 1) + "…" : text; }
  function lines(text) { return text.match(/[^\n]*\n|[^\n]+$/g) || []; }
  function uniq(xs) { var seen = {}, out = []; xs.forEach(function (x) { if (!seen[x]) { seen[x] = 1; out.push(x); } }); return out; }
  function tagList(tags) { return (tags || []).map(function (t) { return el("span", {class: "tag"}, t); }); }

  // -- header and config ------------------------------------------------------------------------------------------
  function renderHeader() {
    document.getElementById("title").textContent = D.title + (D.kind === "eval" ? " (eval report)" : "");
    var size = parseInt((document.querySelector('meta[name="file-bytes"]').content || "").trim(), 10);
    var facts = document.getElementById("facts");
    add(facts, [el("span", {id: "episode-count"}, D.episodes.length + " episodes"),
                el("span", null, D.tasks.length + " held-out tasks"),
                el("span", null, D.stages.length + " validation stages"),
                D.train_stages.length ? el("span", null, D.train_stages.length + " iterations with kept training episodes") : null,
                el("span", {id: "file-size"}, "this file: " + bytes(size)),
                isNum(D.wall_seconds) ? el("span", null, "run wall time " + fmt(D.wall_seconds / 60, 1) + " min") : null,
                el("span", {class: "dim"}, D.source)]);
    var warnings = D.warnings || [];
    if (warnings.length) {
      var box = document.getElementById("warnings");
      add(box, [el("b", null, "Lines that could not be read (left out):")].concat(warnings.map(function (w) { return el("div", null, w); })));
      box.hidden = false;
    }
  }

  function renderConfig() {
    var table = document.getElementById("config"), rows = (D.config && D.config.rows) || [];
    if (!rows.length) add(table, el("tr", null, el("td", {class: "empty"}, "no config.yaml")));
    for (var i = 0; i < rows.length; i += 3) {  // three settings a row
      add(table, el("tr", null, rows.slice(i, i + 3).map(function (r) {
        return [el("th", null, r[0]), el("td", {class: "config-value"}, str(r[1]))];
      })));
    }
    document.getElementById("config-text").textContent = (D.config && D.config.text) || "";
  }

  // -- curves -----------------------------------------------------------------------------------------------------
  function renderCurves() {
    var box = document.getElementById("curves"), tip = document.getElementById("tip");
    if (!D.curves.length) { add(box, el("p", {class: "empty"}, "no iterations in metrics.jsonl")); return; }
    D.curves.forEach(function (panel) {
      var W = 340, H = 170, L = 56, R = 8, T = 8, B = 22;
      var pts = [].concat.apply([], panel.series.map(function (s) { return s.points; }));
      var xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
      var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
      var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
      if (x1 === x0) { x0 -= 1; x1 += 1; }
      if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 0.5; y1 += Math.abs(y1) * 0.1 || 0.5; }
      var pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
      function X(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
      function Y(v) { return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); }
      var s = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, class: "curve"});
      s.appendChild(svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fbfcfd", stroke: "#d0d7de"}));
      for (var k = 0; k <= 3; k++) {
        var yv = y0 + (y1 - y0) * k / 3, yy = Y(yv);
        s.appendChild(svg("line", {x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#eaeef2"}));
        var t = svg("text", {x: L - 4, y: yy + 3, "text-anchor": "end"}); t.textContent = tick(yv, y1 - y0); s.appendChild(t);
      }
      var xticks = uniq(xs.slice().sort(function (a, b) { return a - b; }));
      var step = Math.max(1, Math.ceil(xticks.length / 8));
      xticks.forEach(function (xv, i) {
        if (i % step && i !== xticks.length - 1) return;
        var t = svg("text", {x: X(xv), y: H - 8, "text-anchor": "middle"}); t.textContent = String(xv); s.appendChild(t);
      });
      panel.series.forEach(function (ser, si) {
        var color = COLORS[si % COLORS.length], dashed = ser.name.indexOf("val/") === 0;
        s.appendChild(svg("polyline", {fill: "none", stroke: color, "stroke-width": 1.8,
          "stroke-dasharray": dashed ? "4 3" : null,
          points: ser.points.map(function (p) { return X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); }).join(" ")}));
        ser.points.forEach(function (p) {
          var c = svg("circle", {cx: X(p[0]), cy: Y(p[1]), r: 2.6, fill: color});
          var title = svg("title"); title.textContent = ser.name + " @ " + p[0] + ": " + fmt(p[1], 4);
          c.appendChild(title); s.appendChild(c);
        });
      });
      var guide = svg("line", {y1: T, y2: H - B, stroke: "#8c959f", "stroke-dasharray": "2 2", visibility: "hidden"});
      s.appendChild(guide);
      var overlay = svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "transparent"});
      overlay.addEventListener("mousemove", function (ev) {
        var box = s.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width;
        var best = xticks[0];
        xticks.forEach(function (xv) { if (Math.abs(X(xv) - mx) < Math.abs(X(best) - mx)) best = xv; });
        guide.setAttribute("x1", X(best)); guide.setAttribute("x2", X(best)); guide.setAttribute("visibility", "visible");
        var text = [panel.title + " @ iteration " + best];
        panel.series.forEach(function (ser) {
          ser.points.forEach(function (p) { if (p[0] === best) text.push(ser.name + ": " + fmt(p[1], 4)); });
        });
        tip.textContent = text.join("\n"); tip.hidden = false;
        tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 10) + "px";
      });
      overlay.addEventListener("mouseleave", function () { tip.hidden = true; guide.setAttribute("visibility", "hidden"); });
      s.appendChild(overlay);
      var legend = el("div", {class: "legend"}, panel.series.map(function (ser, si) {
        return el("span", null, el("i", {style: "background:" + COLORS[si % COLORS.length]}), ser.name);
      }));
      add(box, el("div", {class: "chart", "data-title": panel.title}, el("div", {class: "ctitle"}, panel.title), s, legend));
    });
  }

  // -- validation stages ------------------------------------------------------------------------------------------
  function renderStages() {
    var table = document.getElementById("stage-table"), rows = D.validation;
    if (!rows.length) { add(table, el("tr", null, el("td", {class: "empty"}, "no validation records"))); return; }
    var sources = uniq([].concat.apply([], rows.map(function (r) { return Object.keys(r.by_source || {}); })));
    add(table, el("tr", null, el("th", null, "stage"), el("th", null, "iteration"), el("th", null, "cases"),
      el("th", null, "success"), el("th", null, "reward"), el("th", null, "endings"),
      sources.map(function (s) { return el("th", null, s); })));
    rows.forEach(function (r) {
      var ends = Object.keys(r.terminations || {}).map(function (k) { return k + " " + r.terminations[k]; }).join(", ");
      var solved = isNum(r.cases) && isNum(r.success_rate) ? Math.round(r.success_rate * r.cases) + "/" + r.cases + " " : "";
      add(table, el("tr", {class: "stage-row"}, el("th", null, r.label), el("td", {class: "num"}, r.iteration == null ? "-" : str(r.iteration)),
        el("td", {class: "num"}, r.cases == null ? "-" : str(r.cases)), el("td", {class: "num"}, solved + "(" + pct(r.success_rate) + ")"),
        el("td", {class: "num"}, fmt(r.reward_mean)), el("td", null, ends),
        sources.map(function (s) {
          var b = (r.by_source || {})[s];
          return el("td", {class: "num"}, b ? pct(b.success_rate) + (b.cases != null ? " of " + b.cases : "") : "-");
        })));
    });
  }

  // -- paged tables -----------------------------------------------------------------------------------------------
  function pager(id, total, page, go) {
    var box = clear(document.getElementById(id)), pages = Math.max(1, Math.ceil(total / PAGE));
    add(box, [el("button", {disabled: page <= 0 ? "" : null, onclick: function () { go(page - 1); }}, "‹ prev"),
              el("span", {class: "page-label"}, "page " + (page + 1) + " of " + pages),
              el("button", {disabled: page >= pages - 1 ? "" : null, onclick: function () { go(page + 1); }}, "next ›")]);
  }
  function select(id, label, options, onchange) {
    var s = el("select", {id: id, onchange: onchange}, options.map(function (o) {
      return el("option", {value: Array.isArray(o) ? o[0] : o}, Array.isArray(o) ? o[1] : o);
    }));
    return el("label", null, label + " ", s);
  }
  function value(id) { return document.getElementById(id).value; }

  var sources = uniq(D.episodes.map(function (e) { return e.ds; })).sort();
  var valTags = uniq([].concat.apply([], D.episodes.filter(function (e) { return D.stages.indexOf(e.stage) >= 0; })
    .map(function (e) { return e.tags; }))).sort();
  var allTags = uniq([].concat.apply([], D.episodes.map(function (e) { return e.tags; }))).sort();

  // -- held-out tasks, stage by stage -----------------------------------------------------------------------------
  var taskPage = 0;
  function taskFilters() {
    var box = document.getElementById("task-filters"), n = D.stages.length;
    var stageOpts = D.stages.map(function (s, i) { return [String(i), s]; });
    var redo = function () { taskPage = 0; renderTasks(); };
    add(box, [select("task-from", "from", stageOpts, redo), select("task-to", "to", stageOpts, redo),
      select("task-change", "change", [["all", "all tasks"], ["up", "fail → success"], ["down", "success → fail"],
        ["changed", "changed"], ["same", "unchanged"]], redo),
      select("task-source", "data source", [["", "all"]].concat(sources), redo),
      select("task-tag", "an episode ended", [["", "any way"]].concat(valTags), redo),
      el("label", null, "search ", el("input", {id: "task-search", type: "search", placeholder: "task text or id", oninput: redo}))]);
    if (n) document.getElementById("task-to").value = String(n - 1);
  }
  function taskMatches(t) {
    var a = +value("task-from"), b = +value("task-to"), change = value("task-change");
    var x = t.share[a], y = t.share[b];
    if (change !== "all") {
      if (x == null || y == null) return false;
      if (change === "same" && x !== y) return false;
      if (change === "changed" && x === y) return false;
      if (change === "up" && !(y > x)) return false;
      if (change === "down" && !(y < x)) return false;
    }
    if (value("task-source") && t.ds !== value("task-source")) return false;
    var tag = value("task-tag");
    if (tag && !t.eps.some(function (ids) { return ids.some(function (i) { return byIndex[i].tags.indexOf(tag) >= 0; }); })) return false;
    var q = value("task-search").toLowerCase();
    return !q || txt(t.task).toLowerCase().indexOf(q) >= 0 || t.id.toLowerCase().indexOf(q) >= 0;
  }
  function renderTasks() {
    var table = clear(document.getElementById("tasks"));
    if (!D.tasks.length) { add(table, el("tr", null, el("td", {class: "empty"}, "no validation episodes"))); return; }
    var shown = D.tasks.filter(taskMatches), pages = Math.max(1, Math.ceil(shown.length / PAGE));
    taskPage = Math.min(taskPage, pages - 1);
    add(table, el("tr", null, el("th", null, "task"), el("th", null, "data source"),
      D.stages.map(function (s) { return el("th", null, s); })));
    shown.slice(taskPage * PAGE, (taskPage + 1) * PAGE).forEach(function (t) {
      add(table, el("tr", {class: "task-row", "data-task": t.id}, el("td", {title: t.id}, short(txt(t.task), 90)), el("td", null, t.ds),
        t.eps.map(function (ids, si) {
          if (!ids.length) return el("td", {class: "cell dim"}, "·");
          var wins = ids.filter(function (i) { return byIndex[i].ok; }).length;
          var mark = ids.length === 1 ? (wins ? "✓" : "✗") : wins + "/" + ids.length;
          var cls = wins === ids.length ? "ok" : wins ? "mid" : "fail";
          return el("td", {class: "cell " + cls, title: D.stages[si] + ": " + byIndex[ids[0]].term + " (#episode-" + ids[0] + ")",
                           onclick: function (ev) { if (!linkClicked(ev)) openEpisode(ids[0]); }}, episodeLink(ids[0], mark));
        })));
    });
    var count = document.getElementById("task-count") || el("span", {id: "task-count", class: "count"});
    count.textContent = shown.length + " of " + D.tasks.length + " tasks";
    pager("tasks-pager", shown.length, taskPage, function (p) { taskPage = p; renderTasks(); });
    document.getElementById("tasks-pager").appendChild(count);
  }

  // -- all episodes -----------------------------------------------------------------------------------------------
  var epPage = 0;
  function episodeFilters() {
    var box = document.getElementById("episode-filters");
    var redo = function () { epPage = 0; renderEpisodes(); };
    add(box, [select("ep-stage", "stage", [["", "all"]].concat(D.stages, D.train_stages), redo),
      select("ep-source", "data source", [["", "all"]].concat(sources), redo),
      select("ep-tag", "ended", [["", "any way"]].concat(allTags), redo),
      select("ep-outcome", "outcome", [["", "all"], ["ok", "success"], ["fail", "failure"]], redo),
      el("label", null, "search ", el("input", {id: "ep-search", type: "search", placeholder: "task, uid or response", oninput: redo}))]);
  }
  function episodeMatches(e) {
    if (value("ep-stage") && e.stage !== value("ep-stage")) return false;
    if (value("ep-source") && e.ds !== value("ep-source")) return false;
    if (value("ep-tag") && e.tags.indexOf(value("ep-tag")) < 0) return false;
    var outcome = value("ep-outcome");
    if (outcome && (outcome === "ok") !== e.ok) return false;
    var q = value("ep-search").toLowerCase();
    return !q || txt(e.task).toLowerCase().indexOf(q) >= 0 || String(e.uid).toLowerCase().indexOf(q) >= 0 ||
      e.steps.some(function (s) { return s.r.toLowerCase().indexOf(q) >= 0; });
  }
  function renderEpisodes() {
    var table = clear(document.getElementById("episodes"));
    var shown = D.episodes.filter(episodeMatches), pages = Math.max(1, Math.ceil(shown.length / PAGE));
    epPage = Math.min(epPage, pages - 1);
    add(table, el("tr", null, ["link", "uid", "stage", "task", "data source", "reward", "outcome", "ended", "steps"].map(function (h) {
      return el("th", null, h);
    })));
    shown.slice(epPage * PAGE, (epPage + 1) * PAGE).forEach(function (e) {
      add(table, el("tr", {class: "ep-row", "data-episode": e.i, onclick: function (ev) { if (!linkClicked(ev)) openEpisode(e.i); }},
        el("td", null, episodeLink(e.i, "#episode-" + e.i)), el("td", {class: "uid", title: e.uid}, short(e.uid, 24)), el("td", null, e.stage),
        el("td", null, short(txt(e.task), 80)), el("td", null, e.ds),
        el("td", {class: "num"}, fmt(e.reward)), el("td", {class: e.ok ? "ok" : "fail"}, e.ok ? "success" : "failure"),
        el("td", null, tagList(e.tags)), el("td", {class: "num"}, e.steps.length)));
    });
    var count = el("span", {id: "episode-shown", class: "count"}, shown.length + " of " + D.episodes.length + " episodes");
    pager("episodes-pager", shown.length, epPage, function (p) { epPage = p; renderEpisodes(); });
    document.getElementById("episodes-pager").appendChild(count);
  }

  // -- one episode ------------------------------------------------------------------------------------------------
  function applyOps(prev, ops) {  // the same rule as view.apply_diff
    var a = lines(prev), pos = 0, segs = [];
    ops.forEach(function (op) {
      if (op[0] === "+") segs.push(["+", txt(op[1])]);
      else { segs.push([op[0], a.slice(pos, pos + op[1]).join("")]); pos += op[1]; }
    });
    return segs;
  }
  function seen(prompt, step) {  // view.seen_text: what the next step's prompt is compared with
    if (step.k === "messages") return prompt + "── assistant ──\n" + step.r + "\n";
    return step.k === "text" ? prompt + step.r : "";
  }
  function json(v) { return typeof v === "string" ? v : JSON.stringify(v, null, 1); }
  function callsTable(calls) {
    return el("table", {class: "calls"}, el("tr", null, ["tool", "arguments", "output", "error"].map(function (h) { return el("th", null, h); })),
      calls.map(function (c) {
        return el("tr", null, el("td", null, c.name || "-"), el("td", null, el("pre", null, c.raw != null ? c.raw : json(c.arguments))),
          el("td", null, el("pre", {class: "tool-output"}, c.output == null ? "" : str(c.output))),
          el("td", {class: c.error ? "fail" : "dim"}, c.error || "-"));
      }));
  }
  // an episode whose calls branch (a compacted history, a subagent, parallel calls): its branches, indented
  function branchName(t, start) {
    return "branch " + t.b + (start && t.of != null ? ", from step " + (t.of + 1) +
      (isNum(t.sp) ? " (" + t.sp + " tokens shared)" : "") : "");
  }
  function branchTree(tree) {
    return el("div", {id: "branch-tree"}, el("h3", null, tree.length + " branches"),
      el("div", {class: "dim"}, "a call whose prompt does not continue an earlier call's prompt and reply starts a branch"),
      tree.map(function (t) {
        return el("div", {class: "branch", "data-branch": t.b, style: "padding-left: " + 18 * t.depth + "px"},
          (t.depth ? "└ " : "") + branchName(t, true) + ": step" + (t.steps.length > 1 ? "s " : " ") +
          t.steps.map(function (n) { return n + 1; }).join(" → "));
      }));
  }
  function episodeLink(i, text) { return el("a", {class: "ep-link", href: "#episode-" + i}, text); }
  function linkClicked(ev) { return !!(ev.target.closest && ev.target.closest("a")); }  // the link opens it
  function openEpisode(i) {
    if (location.hash !== "#episode-" + i) location.hash = "episode-" + i; else showEpisode(i);
  }
  function showEpisode(i, why) {  // why: the page opened it by itself (not scrolled to), and why this one
    var e = byIndex[i], box = clear(document.getElementById("episode"));
    if (!e) { add(box, el("p", {class: "empty"}, "no episode " + i)); return; }
    Array.prototype.forEach.call(document.querySelectorAll("tr.current"), function (r) { r.classList.remove("current"); });
    var row = document.querySelector('tr.ep-row[data-episode="' + i + '"]'); if (row) row.classList.add("current");
    var same = D.episodes.filter(function (o) { return o.tid === e.tid && o.i !== e.i && D.stages.indexOf(o.stage) >= 0; });
    add(box, [why ? el("div", {class: "meta", id: "episode-why"}, "Opened with " + why + ". Any episode opens from its link, "
        + "#episode-N (the tables' links, shareable).") : null,
      el("div", {class: "meta", id: "episode-head"}, episodeLink(i, "#episode-" + i), " · ",
        el("b", null, e.stage), " · uid ", el("span", {class: "uid"}, e.uid === "" ? "-" : e.uid),
        " · task " + e.tid + " · " + e.ds + " · reward " + fmt(e.reward) + " · ",
        el("span", {class: e.ok ? "ok" : "fail"}, e.ok ? "success" : "failure"), " · ended: ", tagList(e.tags)),
      same.length ? el("div", {class: "meta"}, "same task at: ", same.map(function (o) {
        return el("button", {onclick: function () { openEpisode(o.i); }, class: o.ok ? "ok" : "fail"}, o.stage + (o.ok ? " ✓" : " ✗"));
      })) : null,
      el("h3", null, "task"), el("pre", {id: "episode-task"}, txt(e.task))]);
    ["error", "reward_error", "close_error"].forEach(function (k) {
      if (e[k]) add(box, el("details", {class: "err", open: ""}, el("summary", null, k), el("pre", null, str(e[k]))));
    });
    if (e.metrics) add(box, el("div", {class: "meta"}, "metrics: " + Object.keys(e.metrics).map(function (k) { return k + " " + fmt(e.metrics[k]); }).join(", ")));
    if (!e.steps.length) add(box, el("p", {class: "empty"}, "no step: the episode ended before the model acted"));
    var seenBy = [], where = {};  // what the model had after each step; each step's branch (episodes with a tree)
    if (e.tree) {
      add(box, branchTree(e.tree));
      e.tree.forEach(function (t) { t.steps.forEach(function (n) { where[n] = t; }); });
    }
    e.steps.forEach(function (s, n) {
      var base = s.b != null ? s.b : n - 1;  // the step this prompt is compared with (-1: a first prompt)
      var segs = applyOps(base >= 0 ? seenBy[base] || "" : "", s.p);
      var prompt = segs.filter(function (g) { return g[0] !== "-"; }).map(function (g) { return g[1]; }).join("");
      var added = segs.filter(function (g) { return g[0] === "+"; }).reduce(function (m, g) { return m + lines(g[1]).length; }, 0);
      var dropped = segs.filter(function (g) { return g[0] === "-"; }).reduce(function (m, g) { return m + lines(g[1]).length; }, 0);
      var pre = el("pre", {class: "prompt"}, segs.map(function (g) {
        return g[0] === "=" || base < 0 ? g[1] : el("span", {class: g[0] === "+" ? "add" : "del"}, g[1]);
      }));
      var since = e.tree ? "step " + (base + 1) + "'s" : "the previous step's";
      var what = s.k === "ids" ? "the env gave token ids: not recorded as text" : s.k === "unrecorded" ? "not recorded in this episode file" :
        (base < 0 ? "first prompt" : added + " lines new since " + since + " prompt and response" + (dropped ? ", " + dropped + " dropped" : ""));
      var branch = where[n];
      var flags = [s.d ? "done" : null, s.t ? "truncated" : null, s.fr && s.fr !== "stop" ? "finish: " + s.fr : null].filter(Boolean);
      add(box, el("div", {class: "step", "data-step": n, "data-branch": branch ? branch.b : null,
                          style: branch && branch.depth ? "margin-left: " + 18 * branch.depth + "px" : null},
        el("h3", null, "step " + (n + 1) + (branch ? " · " + branchName(branch, branch.steps[0] === n) : "")),
        el("div", {class: "meta"}, "reward " + fmt(s.rw, 4) + (flags.length ? " · " + flags.join(" · ") : "") +
          " · prompt " + (s.pt == null ? "?" : s.pt) + " tokens · response " + (s.rt == null ? "?" : s.rt) + " tokens" +
          (s.te ? " · tool errors " + JSON.stringify(s.te) : "")),
        el("details", {class: "prompt-box"}, el("summary", null, "prompt as the model saw it (" + what + ")"),
          s.k === "messages" ? el("div", {class: "dim"}, "chat messages as the env gave them; the chat template's markup is not shown") : null,
          s.tools ? el("pre", null, "tools: " + json(s.tools)) : null, pre),
        el("div", null, el("b", null, "response")), el("pre", {class: "response"}, s.r),
        s.c && s.c.length ? [el("div", null, el("b", null, "tool calls")), callsTable(s.c)] :
          s.f ? [el("div", null, el("b", null, "env feedback")), el("pre", {class: "feedback"}, s.f)] : null));
      seenBy[n] = seen(prompt, s);
    });
    document.getElementById("nav-episode").textContent = "episode #" + i + " (" + e.stage + ")";
    var pane = document.getElementById("episode-section");
    if (beside()) pane.scrollTop = 0;  // the pane is in view: show the new episode from its top
    else if (!why) pane.scrollIntoView();
  }
  function beside() { return getComputedStyle(document.getElementById("layout")).display === "grid"; }
  function navHeight() {  // the sticky episode pane starts below the sticky nav
    document.documentElement.style.setProperty("--nav-height", document.querySelector("nav").offsetHeight + "px");
  }
  function route(loading) {  // a section's anchor leaves the episode shown; a page opened without #episode-N shows D.start
    var m = /^#episode-(\d+)$/.exec(location.hash);
    if (m) showEpisode(+m[1]);
    else if (loading === true && D.start) showEpisode(D.start.episode, D.start.why);
  }

  navHeight(); window.addEventListener("resize", navHeight);
  renderHeader(); renderConfig(); renderCurves(); renderStages();
  taskFilters(); renderTasks(); episodeFilters(); renderEpisodes();
  window.addEventListener("hashchange", route);
  route(true);
  document.body.setAttribute("data-ready", "1");
})();
