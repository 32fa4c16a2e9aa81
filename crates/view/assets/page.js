// rollpoint page: one script for the live dashboard and the static report.
//
// Modes (body data-mode):
//   report: the run view is inline in script#rp-view; each rollout's detail is inline in
//           script#rp-detail-ID and parsed only when that rollout is opened.
//   live:   nothing inline. The access token comes from the URL hash, as "#token=abc" or
//           "#/rollout/ID&token=abc" (a "&token=..." or leading "token=..." parameter of the hash);
//           it is kept in sessionStorage "rp-token" and removed from the URL at once.
//           Data comes from GET /v1/run/view, /v1/rollouts/ID/view and the SSE stream /v1/run/live.
// Routing: "#/" or "" is the run view, "#/rollout/ID" (ID URL-encoded) is one rollout.
// Every string from the data is untrusted: the page builds DOM nodes with textContent and
// setAttribute only (helpers el() and sv() below), never by parsing markup strings.
(function () {
  "use strict";

  // ---------------------------------------------------------------- DOM helpers
  var SVGNS = "http://www.w3.org/2000/svg";

  function setAttrs(n, attrs) {
    if (!attrs) return;
    for (var k in attrs) {
      var v = attrs[k];
      if (v == null || v === false) continue;
      if (k === "text") n.textContent = String(v);
      else if (k.slice(0, 2) === "on" && typeof v === "function") n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function append(n, kids) {
    if (kids == null) return;
    if (!Array.isArray(kids)) kids = [kids];
    for (var i = 0; i < kids.length; i++) {
      var c = kids[i];
      if (c == null || c === false) continue;
      n.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  // el("div", {class: "x", text: "y"}, [children]) -> HTML element
  function el(tag, attrs, kids) {
    var n = document.createElement(tag);
    setAttrs(n, attrs);
    append(n, kids);
    return n;
  }
  // sv("rect", {...}, parent) -> SVG element appended to parent
  function sv(tag, attrs, parent) {
    var n = document.createElementNS(SVGNS, tag);
    setAttrs(n, attrs);
    if (parent) parent.appendChild(n);
    return n;
  }
  function svTitle(node, text) { sv("title", { text: text }, node); }
  function $(id) { return document.getElementById(id); }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); return n; }
  function hasOwn(o, k) { return Object.prototype.hasOwnProperty.call(o, k); }

  // ---------------------------------------------------------------- formatting
  function pad2(n) { return n < 10 ? "0" + n : "" + n; }
  function fmtClock(ms) {
    if (ms == null) return "-";
    var d = new Date(ms);
    return pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds());
  }
  function fmtDur(ms) {
    if (ms == null || !isFinite(ms)) return "-";
    if (ms < 0) ms = 0;
    if (ms < 1000) return Math.round(ms) + " ms";
    var s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + " s";
    var total = Math.round(s);
    if (total < 3600) return Math.floor(total / 60) + " min " + (total % 60) + " s";
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60);
    return h + " h " + m + " min";
  }
  function fmtBytes(b) {
    if (b == null || !isFinite(b)) return "-";
    if (b < 1024) return b + " B";
    var units = ["KiB", "MiB", "GiB", "TiB"], v = b / 1024, i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (v < 10 ? v.toFixed(1) : Math.round(v)) + " " + units[i];
  }
  function fmtNum(v) {
    if (v == null) return "-";
    if (Math.round(v) === v) return String(v);
    return String(Math.round(v * 1000) / 1000);
  }
  function fmt3(v) { return v == null ? "-" : Number(v).toFixed(3); }
  function truncate(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
  function show(v) {
    if (v == null) return "-";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function encId(id) { return encodeURIComponent(id); }

  // ---------------------------------------------------------------- state
  var S = {
    mode: document.body.getAttribute("data-mode") === "live" ? "live" : "report",
    view: null,          // RunView
    viewText: null,      // last raw text of /v1/run/view (live) to skip identical refreshes
    byId: null,          // rollout id -> row
    route: { name: "run" },
    detailText: null,    // last raw text of the open rollout's /view (live)
    token: null,
    stopped: false,      // live: stop the stream (wrong token / run ended)
    abort: null,
    ui: { state: "", error: "", reward: "all", attempt: "", sort: null, dir: 1, page: 0 },
    shown: [],           // rows of the current table page, in table order
    chartsStale: false,  // charts were skipped while the run view was hidden
    built: false
  };
  var PAGE = 100;

  function nowMs() {
    if (S.mode === "live") return Date.now();
    return (S.view && S.view.generated_ms) || Date.now();
  }
  function ready() { document.body.setAttribute("data-ready", "1"); }
  function unready() { document.body.setAttribute("data-ready", "0"); }

  function showError(msg) {
    var e = $("error");
    if (!msg) { e.hidden = true; clear(e); return; }
    e.textContent = msg;
    e.hidden = false;
  }

  // ---------------------------------------------------------------- time / value scales
  var TSTEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function timeTicks(t0, t1, maxTicks) {
    var span = t1 - t0, step = TSTEPS[TSTEPS.length - 1] * 1000;
    for (var i = 0; i < TSTEPS.length; i++) {
      if (span / (TSTEPS[i] * 1000) <= maxTicks) { step = TSTEPS[i] * 1000; break; }
    }
    var off = new Date(t0).getTimezoneOffset() * 60000; // align ticks on local clock times
    var out = [];
    for (var t = Math.ceil((t0 - off) / step) * step + off; t <= t1; t += step) out.push(t);
    return out;
  }
  function niceTicks(max, n, integer) {
    if (!(max > 0)) max = 1;
    var raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
    if (integer && step < 1) step = 1;
    var ticks = [];
    for (var k = 0; ; k++) {
      var v = Math.round(k * step * 1e9) / 1e9;
      ticks.push(v);
      if (v >= max) break;
    }
    return ticks;
  }
  function scale(d0, d1, r0, r1) {
    var span = d1 - d0 || 1;
    return function (v) { return Math.round(r0 + (v - d0) / span * (r1 - r0)); };
  }
  // A horizontal time axis at y (labels below), with light grid lines up to gridTop.
  function drawTimeAxis(g, x, t0, t1, y, gridTop, labelsAbove) {
    var ax = sv("g", { class: "axis time-axis" }, g);
    var left = x(t0), right = x(t1);
    sv("line", { x1: left, x2: right, y1: y, y2: y }, ax);
    var ticks = timeTicks(t0, t1, Math.max(2, Math.floor((right - left) / 95)));
    ticks.forEach(function (t) {
      var tx = x(t);
      if (gridTop != null) sv("line", { class: "grid", x1: tx, x2: tx, y1: gridTop, y2: y }, ax);
      sv("line", { x1: tx, x2: tx, y1: y, y2: labelsAbove ? y - 4 : y + 4 }, ax);
      var anchor = tx > right - 26 ? "end" : tx < left + 26 ? "start" : "middle"; // keep edge labels inside
      sv("text", { x: tx, y: labelsAbove ? y - 6 : y + 15, "text-anchor": anchor, text: fmtClock(t) }, ax);
    });
  }
  // A vertical value axis at x from y0 (bottom) to y1 (top).
  function drawValueAxis(g, x, ticks, y, fmt, right) {
    var ax = sv("g", { class: "axis value-axis" }, g);
    ticks.forEach(function (v) {
      var ty = y(v);
      sv("line", { class: "grid", x1: x, x2: right, y1: ty, y2: ty }, ax);
      sv("text", { x: x - 4, y: ty + 4, "text-anchor": "end", text: fmt(v) }, ax);
    });
    sv("line", { x1: x, x2: x, y1: y(ticks[0]), y2: y(ticks[ticks.length - 1]) }, ax);
  }
  function newSvg(parent, w, h, attrs) {
    var s = sv("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, "shape-rendering": "crispEdges" });
    setAttrs(s, attrs);
    parent.appendChild(s);
    return s;
  }

  // ---------------------------------------------------------------- timeline (launch bars per rollout)
  // Draws one lane per row into container; returns the number of launch bars drawn.
  // withResumes: widen the time span so that every crash/stop and resume of the run shows.
  var C = { launch: "#2f7ed8", resumed: "#13a36b", crash: "#d83a2f", ck: "#555", ckFail: "#e8870e", stop: "#7b3fc4" };
  function drawTimeline(container, rows, events, minWidth, withResumes) {
    // read the layout before clearing, so a redraw does not make the page jump
    var W = Math.max(minWidth || 900, container.clientWidth - 2), st = container.scrollTop, sl = container.scrollLeft;
    clear(container);
    var now = nowMs(), t0 = Infinity, t1 = -Infinity;
    rows.forEach(function (r) {
      (r.launches || []).forEach(function (l) {
        if (l.start_ms == null) return;
        t0 = Math.min(t0, l.start_ms);
        t1 = Math.max(t1, l.end_ms == null ? now : l.end_ms);
      });
    });
    if (withResumes && isFinite(t0)) {
      (events || []).forEach(function (e) {
        if (e.kind !== "resumed" || e.at_ms == null) return;
        t0 = Math.min(t0, e.down_from_ms != null ? e.down_from_ms : e.at_ms);
        t1 = Math.max(t1, e.at_ms);
      });
    }
    if (!isFinite(t0)) {
      var sm = (S.view && S.view.summary) || {};
      t0 = sm.started_ms || now - 60000;
      t1 = sm.ended_ms || now;
    }
    if (t1 - t0 < 1000) t1 = t0 + 1000;
    var padT = (t1 - t0) * 0.02; t0 -= padT; t1 += padT;

    var laneH = 20, barH = 14, top = 46, axisY = 22, labelW = 170, rightPad = 16;
    var bottomAxis = rows.length > 12; // long lane lists get the time axis below as well
    var H = top + Math.max(1, rows.length) * laneH + (bottomAxis ? 26 : 8);
    var svg = newSvg(container, W, H, { class: "timeline-svg" });
    var x = scale(t0, t1, labelW, W - rightPad);
    var lanesBottom = top + rows.length * laneH;
    if (bottomAxis) drawTimeAxis(svg, x, t0, t1, lanesBottom + 2, null, false);

    rows.forEach(function (r, i) {
      if (i % 2) sv("rect", { class: "lane-alt", x: 0, y: top + i * laneH, width: W, height: laneH }, svg);
    });
    drawTimeAxis(svg, x, t0, t1, axisY, null, true);
    timeTicks(t0, t1, Math.max(2, Math.floor((W - labelW) / 95))).forEach(function (t) {
      sv("line", { class: "grid", x1: x(t), x2: x(t), y1: axisY, y2: lanesBottom }, svg);
    });
    var clip = function (t) { return Math.max(t0, Math.min(t1, t)); };

    // downtime first, so the bars on top keep their exact colours
    (events || []).forEach(function (e) {
      if (e.kind !== "resumed" || e.down_from_ms == null || e.at_ms < t0 || e.down_from_ms > t1) return;
      var a = x(clip(e.down_from_ms)), b = x(clip(e.at_ms));
      var d = sv("rect", { class: "downtime", x: a, y: axisY + 1, width: Math.max(1, b - a),
        height: lanesBottom - axisY - 1, fill: C.crash, "fill-opacity": 0.12 }, svg);
      var what = e.crash ? "crash, resumed" : "stopped, resumed";
      svTitle(d, what + ": down " + fmtClock(e.down_from_ms) + " to " + fmtClock(e.at_ms) + " (" + fmtDur(e.at_ms - e.down_from_ms) + ")");
      sv("text", { class: "down-label", x: a + 3, y: top - 8, text: what }, svg);
    });

    var bars = 0;
    rows.forEach(function (r, i) {
      var y = top + i * laneH, yb = y + Math.floor((laneH - barH) / 2);
      var a = sv("a", { href: "#/rollout/" + encId(r.id) }, svg);
      sv("text", { class: "lane-label", x: labelW - 6, y: y + 14, "text-anchor": "end", text: truncate(r.id, 26) }, a);
      svTitle(a, r.id + " (" + r.state + ")");
      var prev = null;
      (r.launches || []).forEach(function (l, j) {
        if (l.start_ms == null) { prev = l; return; }
        var end = l.end_ms == null ? now : l.end_ms;
        var xa = x(l.start_ms), xb = x(end);
        if (l.resumed && j > 0) {
          var pe = prev ? (prev.end_ms != null ? prev.end_ms : prev.start_ms) : null;
          if (pe != null) {
            var px = x(pe);
            sv("line", { class: "continuation", x1: Math.min(px, xa - 3), x2: xa, y1: y + laneH / 2, y2: y + laneH / 2,
              stroke: C.resumed, "stroke-width": 2, "stroke-dasharray": "3,2" }, svg);
          }
        }
        var rect = sv("rect", {
          class: l.resumed ? "launch resumed" : "launch", "data-launch": l.id, "data-rollout": r.id,
          x: xa, y: yb, width: Math.max(2, xb - xa), height: barH, fill: l.resumed ? C.resumed : C.launch
        }, svg);
        svTitle(rect, launchTitle(r, l));
        bars++;
        prev = l;
      });
    });

    // run events on top: checkpoints, failed checkpoints, resumes
    (events || []).forEach(function (e) {
      if (e.at_ms == null || e.at_ms < t0 || e.at_ms > t1) return;
      var ex = x(e.at_ms), line;
      if (e.kind === "checkpoint") {
        line = sv("line", { class: "checkpoint", x1: ex, x2: ex, y1: axisY, y2: lanesBottom, stroke: C.ck,
          "stroke-width": 1, "stroke-dasharray": "2,3" }, svg);
        svTitle(line, "checkpoint " + show(e.id) + " at " + fmtClock(e.at_ms) + ", took " + fmtDur(e.total_ms));
      } else if (e.kind === "checkpoint_failed") {
        line = sv("line", { class: "checkpoint failed", x1: ex, x2: ex, y1: axisY, y2: lanesBottom, stroke: C.ckFail,
          "stroke-width": 2, "stroke-dasharray": "4,2" }, svg);
        svTitle(line, "checkpoint " + show(e.id) + " failed at " + fmtClock(e.at_ms) + ": " + show(e.error));
      } else if (e.kind === "resumed") {
        line = sv("line", { class: e.crash ? "resume crash" : "resume", x1: ex, x2: ex, y1: axisY, y2: lanesBottom,
          stroke: e.crash ? C.crash : C.stop, "stroke-width": 3 }, svg);
        svTitle(line, (e.crash ? "resumed after a crash" : "resumed after a stop") + " at " + fmtClock(e.at_ms) +
          (e.from ? " from checkpoint " + e.from : " (no checkpoint)"));
      }
    });
    container.setAttribute("data-launch-bars", bars);
    container.scrollTop = st;
    container.scrollLeft = sl;
    return { svg: svg, bars: bars };
  }
  function launchTitle(r, l) {
    var t = "launch " + l.id + " of " + r.id + "\nattempt " + show(l.attempt) +
      (l.resumed ? " (continued on its saved session)" : "") +
      "\nwhy: " + show(l.reason) +
      "\n" + fmtClock(l.start_ms) + " to " + (l.end_ms == null ? "now" : fmtClock(l.end_ms)) +
      (l.end_ms != null ? " (" + fmtDur(l.end_ms - l.start_ms) + ")" : "") +
      "\npauses: " + (l.pauses || 0) + (l.pauses ? ", " + fmtDur(l.paused_ms || 0) : "") +
      "\nended: " + (l.end == null ? "still running" : l.end) + (l.exit_code != null ? ", exit code " + l.exit_code : "");
    if (l.note) t += "\nnote: " + l.note;
    return t;
  }

  // ---------------------------------------------------------------- charts
  function chartWidth(holder) { return Math.max(520, (holder.clientWidth || 600) - 18); }
  function runSpan(v) {
    var sm = v.summary || {}, t0 = sm.started_ms, t1 = sm.ended_ms || (S.mode === "live" ? nowMs() : v.generated_ms);
    var ev = v.events || [];
    if (t0 == null && ev.length) t0 = ev[0].at_ms;
    if (t1 == null && ev.length) t1 = ev[ev.length - 1].at_ms;
    if (t0 == null) t0 = nowMs() - 60000;
    if (t1 == null || t1 - t0 < 1000) t1 = t0 + 1000;
    return [t0, t1];
  }

  function drawThroughput(holder, v) {
    var W = chartWidth(holder), H = 210, L = 50, R = 14, T = 10, B = 26;
    clear(holder).appendChild(el("h3", { text: "finished rollouts over time" }));
    var svg = newSvg(holder, W, H, { id: "throughput" });
    var ends = [];
    v.rollouts.forEach(function (r) { if (r.ended_ms != null) ends.push(r.ended_ms); });
    ends.sort(function (a, b) { return a - b; });
    var span = runSpan(v), t0 = Math.min(span[0], ends.length ? ends[0] : Infinity), t1 = Math.max(span[1], ends.length ? ends[ends.length - 1] : -Infinity);
    var x = scale(t0, t1, L, W - R);
    var ticks = niceTicks(ends.length, 4, true);
    var y = scale(0, ticks[ticks.length - 1], H - B, T);
    drawValueAxis(svg, L, ticks, y, fmtNum, W - R);
    drawTimeAxis(svg, x, t0, t1, H - B, null, false);
    svg.setAttribute("data-finished", ends.length);
    if (!ends.length) return;
    var d = "M" + x(t0) + "," + y(0), n = 0;
    for (var i = 0; i < ends.length; i++) {
      n = i + 1;
      if (i + 1 < ends.length && x(ends[i + 1]) === x(ends[i])) continue; // merge points in one pixel column
      d += "H" + x(ends[i]) + "V" + y(n);
    }
    d += "H" + x(t1);
    sv("path", { class: "throughput-line", d: d, fill: "none", stroke: C.launch, "stroke-width": 2, "shape-rendering": "auto" }, svg);
    sv("text", { x: L + 6, y: T + 10, text: n + " finished" }, svg);
  }

  // Histogram: one bar per distinct value when there are few, else 12 equal bins.
  function drawHistogram(holder, id, title, values, fmt) {
    var W = chartWidth(holder), H = 210, L = 50, R = 14, T = 16, B = 30;
    clear(holder).appendChild(el("h3", { text: title + " (" + values.length + ")" }));
    var svg = newSvg(holder, W, H, { id: id });
    if (!values.length) { sv("text", { x: W / 2, y: H / 2, "text-anchor": "middle", text: "no values yet" }, svg); return; }
    var distinct = {}, nd = 0, min = Infinity, max = -Infinity;
    values.forEach(function (v) { if (!hasOwn(distinct, v)) { distinct[v] = 0; nd++; } distinct[v]++; min = Math.min(min, v); max = Math.max(max, v); });
    var bins = [];
    if (nd <= 12) {
      Object.keys(distinct).map(Number).sort(function (a, b) { return a - b; }).forEach(function (k) {
        bins.push({ lo: k, hi: k, n: distinct[k], label: fmt(k) });
      });
    } else {
      var nb = 12, w = (max - min) / nb;
      for (var i = 0; i < nb; i++) bins.push({ lo: min + i * w, hi: min + (i + 1) * w, n: 0, label: fmt(min + i * w) });
      values.forEach(function (v) { bins[Math.min(nb - 1, Math.floor((v - min) / w))].n++; });
    }
    var maxN = 0; bins.forEach(function (b) { maxN = Math.max(maxN, b.n); });
    var ticks = niceTicks(maxN, 4, true), y = scale(0, ticks[ticks.length - 1], H - B, T);
    drawValueAxis(svg, L, ticks, y, fmtNum, W - R);
    var slot = (W - R - L) / bins.length, bw = Math.max(2, Math.floor(slot * 0.8));
    bins.forEach(function (b, i) {
      var bx = Math.round(L + i * slot + (slot - bw) / 2), by = y(b.n);
      var r = sv("rect", { class: "bin", x: bx, y: by, width: bw, height: (H - B) - by, fill: "#6f9fd8",
        "data-lo": b.lo, "data-hi": b.hi, "data-count": b.n }, svg);
      svTitle(r, (b.lo === b.hi ? fmt(b.lo) : fmt(b.lo) + " to " + fmt(b.hi)) + ": " + b.n);
      sv("text", { class: "bin-count", x: bx + bw / 2, y: by - 3, "text-anchor": "middle", text: b.n }, svg);
      sv("text", { class: "bin-label", x: bx + bw / 2, y: H - B + 14, "text-anchor": "middle", text: b.label }, svg);
    });
    sv("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#999" }, svg);
  }

  function drawCheckpoints(holder, v) {
    var W = chartWidth(holder), H = 200, L = 56, R = 14, T = 18, B = 26;
    clear(holder);
    var evs = v.events || [];
    var cks = evs.filter(function (e) { return e.kind === "checkpoint"; });
    var fails = evs.filter(function (e) { return e.kind === "checkpoint_failed"; });
    var res = evs.filter(function (e) { return e.kind === "resumed"; });
    holder.appendChild(el("h3", { text: "checkpoints (" + cks.length + " published, " + fails.length + " failed, " + res.length + " resumes)" }));
    holder.appendChild(el("div", { class: "note", text: "bar: time to checkpoint (dark part: prepare) \u00b7 orange \u25B2: failed \u00b7 line: resume (red: after a crash)" }));
    var svg = newSvg(holder, W, H, { id: "checkpoints-chart" });
    var span = runSpan(v), t0 = span[0], t1 = span[1];
    evs.forEach(function (e) { if (e.at_ms != null) { t0 = Math.min(t0, e.at_ms); t1 = Math.max(t1, e.at_ms); } });
    var pad = (t1 - t0) * 0.02; t0 -= pad; t1 += pad;
    var x = scale(t0, t1, L, W - R);
    var maxMs = 0; cks.forEach(function (e) { maxMs = Math.max(maxMs, e.total_ms || 0); });
    var ticks = niceTicks(maxMs || 1, 4, false), y = scale(0, ticks[ticks.length - 1], H - B, T);
    drawValueAxis(svg, L, ticks, y, fmtDur, W - R);
    drawTimeAxis(svg, x, t0, t1, H - B, null, false);
    res.forEach(function (e) {
      var l = sv("line", { class: "ck-resume", "data-crash": e.crash ? 1 : 0, x1: x(e.at_ms), x2: x(e.at_ms), y1: T, y2: H - B,
        stroke: e.crash ? C.crash : C.stop, "stroke-width": 2 }, svg);
      svTitle(l, (e.crash ? "resumed after a crash" : "resumed after a stop") + " at " + fmtClock(e.at_ms));
    });
    cks.forEach(function (e) {
      var bx = x(e.at_ms) - 3, total = e.total_ms || 0, prep = Math.min(total, e.prepare_ms || 0);
      var yt = y(total), yp = y(prep);
      var g = sv("g", { class: "ck-bar", "data-id": e.id }, svg);
      sv("rect", { x: bx, y: yt, width: 7, height: (H - B) - yt, fill: "#8fb8e8" }, g);
      sv("rect", { class: "ck-prepare", x: bx, y: yp, width: 7, height: (H - B) - yp, fill: "#1f4f8a" }, g);
      sv("text", { class: "ck-label", x: bx + 3, y: yt - 3, "text-anchor": "middle", "font-size": 10, text: fmtDur(total) }, g);
      svTitle(g, "checkpoint " + e.id + " at " + fmtClock(e.at_ms) + "\ntotal " + fmtDur(total) + ", prepare " + fmtDur(e.prepare_ms) +
        ", commit " + fmtDur(e.commit_ms) + ", publish " + fmtDur(e.publish_ms) + ", held " + fmtDur(e.held_ms) +
        ", resume " + fmtDur(e.resume_ms) + ", restarts " + show(e.restarts));
    });
    fails.forEach(function (e) {
      var fx = x(e.at_ms), fy = H - B;
      var p = sv("path", { class: "ck-failed", d: "M" + (fx - 6) + "," + fy + "L" + fx + "," + (fy - 11) + "L" + (fx + 6) + "," + fy + "Z", fill: C.ckFail }, svg);
      svTitle(p, "checkpoint " + show(e.id) + " failed at " + fmtClock(e.at_ms) + ": " + show(e.error));
    });
  }

  // ---------------------------------------------------------------- run view: skeleton (built once)
  var SORTS = [["id", "id"], ["state", "state"], ["attempt", "attempt"], ["reward", "reward"], ["launches", "launches"],
    ["calls", "calls"], ["tokens", "tokens"], ["duration", "duration"], ["error", "error"]];
  var NUMERIC = { attempt: 1, reward: 1, launches: 1, calls: 1, tokens: 1, duration: 1 };

  function buildRunSkeleton() {
    var root = $("run-view");
    var ui = S.ui;
    var ctl = el("div", { id: "controls" }, [
      el("label", { for: "filter-state", text: "state" }), el("select", { id: "filter-state", onchange: function (ev) { ui.state = ev.target.value; ui.page = 0; renderTable(); } }),
      el("label", { for: "filter-error", text: "error" }), el("input", { id: "filter-error", type: "search", placeholder: "error or class", oninput: function (ev) { ui.error = ev.target.value; ui.page = 0; renderTable(); } }),
      el("label", { for: "filter-reward", text: "reward" }),
      el("select", { id: "filter-reward", onchange: function (ev) { ui.reward = ev.target.value; ui.page = 0; renderTable(); } },
        [["all", "all"], ["rewarded", "rewarded"], ["pos", "reward>0"], ["zero", "reward=0"], ["none", "none"]].map(function (o) { return el("option", { value: o[0], text: o[1] }); })),
      el("label", { for: "filter-attempt", text: "attempt \u2265" }), el("input", { id: "filter-attempt", type: "number", min: 0, oninput: function (ev) { ui.attempt = ev.target.value; ui.page = 0; renderTable(); } }),
      el("span", { class: "pager" }, [
        el("button", { id: "page-prev", type: "button", text: "\u25C0 prev", onclick: function () { if (ui.page > 0) { ui.page--; renderTable(); } } }),
        " ", el("span", { id: "page-label" }), " ",
        el("button", { id: "page-next", type: "button", text: "next \u25B6", onclick: function () { ui.page++; renderTable(); } })
      ])
    ]);
    var head = el("tr", null, SORTS.map(function (s) {
      return el("th", { "data-sort": s[0], class: NUMERIC[s[0]] ? "num" : null, text: s[1], title: "sort by " + s[1],
        onclick: function () { if (ui.sort === s[0]) ui.dir = -ui.dir; else { ui.sort = s[0]; ui.dir = 1; } ui.page = 0; renderTable(); } });
    }));
    append(root, [
      el("p", { id: "trusted-warn", class: "warn", hidden: true }),
      el("div", { id: "cards" }),
      el("div", { class: "states-line" }, [el("ul", { id: "states" }),
        el("span", { class: "muted" }, ["infrastructure errors by class: ", el("span", { id: "infra" })])]),
      ctl,
      el("div", { id: "timeline" }),
      el("table", { id: "rollouts", "data-total": 0, "data-shown": 0 }, [el("thead", null, head), el("tbody")]),
      el("h2", { text: "charts" }),
      el("div", { id: "charts" }, [el("div", { class: "chart", id: "chart-throughput" }), el("div", { class: "chart", id: "chart-checkpoints" }),
        el("div", { class: "chart", id: "chart-reward" }), el("div", { class: "chart", id: "chart-duration" })]),
      el("div", { id: "groups-wrap" }),
      el("details", { id: "events" }, [el("summary", { text: "events" }), el("div", { class: "event-list" })])
    ]);
    S.built = true;
  }

  // ---------------------------------------------------------------- run view: render a RunView
  function prepareView(v) {
    v.rollouts = v.rollouts || [];
    v.events = v.events || [];
    v.summary = v.summary || {};
    var by = Object.create(null), now = nowMs();
    v.rollouts.forEach(function (r, i) {
      by[r.id] = r;
      r._i = i;
      r._launches = (r.launches || []).length;
      r._dur = r.started_ms == null ? null : (r.ended_ms == null ? now : r.ended_ms) - r.started_ms;
      r._err = r.error != null ? String(r.error) : (r.infra_class != null ? String(r.infra_class) : null);
      r._errl = ((r.error || "") + "\n" + (r.infra_class || "")).toLowerCase();
    });
    S.view = v;
    S.byId = by;
  }

  function renderRun() {
    var v = S.view;
    if (!S.built) buildRunSkeleton();
    var sm = v.summary, st = sm.states || {};
    document.title = v.title || document.title;
    if (v.title) $("title").textContent = v.title;

    var tw = $("trusted-warn"), trusted = sm.trusted || [];
    if (trusted.length) {
      tw.textContent = "Warning: " + trusted.length + " rollout(s) ran with isolation off (trusted): " + truncate(trusted.join(", "), 400);
      tw.hidden = false;
    } else tw.hidden = true;

    // cards: <div class="card" data-name="NAME"><b>VALUE</b><span>NAME</span></div>
    var infraSum = 0; for (var k in (sm.infra_errors || {})) infraSum += sm.infra_errors[k] || 0;
    var cards = [
      ["tasks", sm.tasks], ["done", sm.done], ["verified", st.verified || 0],
      ["infrastructure errors", st.infra_error != null ? st.infra_error : infraSum],
      ["mean reward", sm.reward_mean == null ? "-" : fmt3(sm.reward_mean)],
      ["model calls", sm.model_calls], ["prompt tokens", sm.prompt_tokens], ["completion tokens", sm.completion_tokens],
      ["launches", sm.launches], ["checkpoints", sm.checkpoints], ["checkpoints failed", sm.checkpoints_failed],
      ["fleet pauses", sm.fleet_pauses], ["resumes", sm.resumes], ["crashes survived", sm.crashes],
      ["cpu time", sm.cpu_ms == null ? "-" : fmtDur(sm.cpu_ms)], ["peak memory", sm.memory_peak_bytes == null ? "-" : fmtBytes(sm.memory_peak_bytes)]
    ];
    // Lines of events.jsonl that could not be read (torn, or of an unknown version or kind).
    if (sm.skipped_events) cards.push(["event lines unread", sm.skipped_events]);
    var cf = document.createDocumentFragment();
    cards.forEach(function (c) {
      cf.appendChild(el("div", { class: "card", "data-name": c[0] }, [el("b", { text: c[1] == null ? "-" : c[1] }), el("span", { text: c[0] })]));
    });
    clear($("cards")).appendChild(cf);

    // states
    var ul = clear($("states"));
    Object.keys(st).forEach(function (s) {
      ul.appendChild(el("li", { "data-state": s, "data-count": st[s] }, s + " " + st[s]));
    });
    var ie = sm.infra_errors || {}, parts = Object.keys(ie).map(function (c) { return c + " " + ie[c]; });
    $("infra").textContent = parts.length ? parts.join(", ") : "none";

    // state filter options: all + each state present
    var sel = $("filter-state"), present = {};
    v.rollouts.forEach(function (r) { present[r.state] = (present[r.state] || 0) + 1; });
    Object.keys(st).forEach(function (s) { if (st[s] && !present[s]) present[s] = 0; });
    clear(sel).appendChild(el("option", { value: "", text: "all" }));
    Object.keys(present).forEach(function (s) { sel.appendChild(el("option", { value: s, text: s + " (" + present[s] + ")" })); });
    if (S.ui.state && !hasOwn(present, S.ui.state)) sel.appendChild(el("option", { value: S.ui.state, text: S.ui.state + " (0)" }));
    sel.value = S.ui.state;

    renderTable();
    renderCharts();
    renderGroups();
    renderEvents();
  }

  function renderCharts() {
    var v = S.view;
    S.chartsStale = $("run-view").hidden; // hidden: no layout width, draw again when shown
    if (S.chartsStale) return;
    drawThroughput($("chart-throughput"), v);
    drawCheckpoints($("chart-checkpoints"), v);
    var rewards = [], durs = [];
    v.rollouts.forEach(function (r) {
      if (r.reward != null) rewards.push(r.reward);
      if (r.started_ms != null && r.ended_ms != null) durs.push(r.ended_ms - r.started_ms);
    });
    drawHistogram($("chart-reward"), "hist-reward", "rewards", rewards, fmtNum);
    drawHistogram($("chart-duration"), "hist-duration", "durations", durs, fmtDur);
  }

  function renderGroups() {
    var wrap = clear($("groups-wrap")), g = S.view.groups;
    if (!g) return;
    wrap.appendChild(el("h2", { text: "groups (pass@1 and pass@" + g.k + ")" }));
    var body = document.createDocumentFragment();
    (g.rows || []).forEach(function (r) {
      body.appendChild(el("tr", { "data-group": r.group }, [el("td", { text: r.group }), el("td", { class: "num", text: r.samples }),
        el("td", { class: "num", text: r.passed }), el("td", { class: "num", text: r.infra_errors }),
        el("td", { class: "p1", text: fmt3(r.pass_at_1) }), el("td", { class: "pk", text: fmt3(r.pass_at_k) })]));
    });
    wrap.appendChild(el("table", { id: "groups", "data-k": g.k }, [
      el("thead", null, el("tr", null, ["group", "samples", "passed", "infra errors", "pass@1", "pass@" + g.k].map(function (h) { return el("th", { text: h }); }))),
      el("tbody", null, body),
      el("tfoot", null, el("tr", { class: "mean" }, [el("td", { text: "mean" }), el("td"), el("td"), el("td"),
        el("td", { class: "p1", text: fmt3(g.mean_pass_at_1) }), el("td", { class: "pk", text: fmt3(g.mean_pass_at_k) })]))
    ]));
  }

  var lastEvents = null;
  function renderEvents() {
    var ev = S.view.events, key = ev.length + ":" + (ev.length ? ev[ev.length - 1].at_ms : "");
    if (key === lastEvents) return;
    lastEvents = key;
    var det = $("events");
    det.querySelector("summary").textContent = "events (" + ev.length + ")";
    var list = clear(det.querySelector(".event-list")), f = document.createDocumentFragment();
    ev.forEach(function (e) {
      var fields = [];
      for (var k in e) {
        if (k === "at_ms" || k === "kind") continue;
        var val = e[k], stamp = /_ms$/.test(k) && typeof val === "number" && val > 1e12; // a unix time, not a duration
        fields.push(k + "=" + (stamp ? fmtClock(val) : show(val)));
      }
      f.appendChild(el("div", { class: "event", "data-kind": e.kind }, [el("time", { text: fmtClock(e.at_ms) }), el("b", { text: e.kind }), fields.join("  ")]));
    });
    list.appendChild(f);
  }

  // ---------------------------------------------------------------- rollout table: filter, sort, page
  function filtered() {
    var ui = S.ui, rows = S.view.rollouts, out = [];
    var err = ui.error.trim().toLowerCase(), att = ui.attempt === "" ? null : Number(ui.attempt);
    if (att != null && !isFinite(att)) att = null;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      if (ui.state && r.state !== ui.state) continue;
      if (err && r._errl.indexOf(err) < 0) continue;
      if (att != null && !(r.attempt >= att)) continue;
      switch (ui.reward) {
        case "rewarded": if (r.reward == null) continue; break;
        case "pos": if (!(r.reward > 0)) continue; break;
        case "zero": if (r.reward !== 0) continue; break;
        case "none": if (r.reward != null) continue; break;
      }
      out.push(r);
    }
    if (ui.sort) {
      var key = { id: "id", state: "state", attempt: "attempt", reward: "reward", launches: "_launches", calls: "calls",
        tokens: "tokens", duration: "_dur", error: "_err" }[ui.sort], dir = ui.dir;
      out.sort(function (a, b) {
        var x = a[key], y = b[key];
        if (x == null || y == null) {
          if (x == null && y == null) return a._i - b._i;
          return x == null ? 1 : -1; // missing values last in both directions
        }
        if (x < y) return -dir;
        if (x > y) return dir;
        return a._i - b._i;
      });
    }
    return out;
  }

  function renderTable() {
    if (!S.view) return;
    var ui = S.ui, rows = filtered(), total = rows.length;
    var pages = Math.max(1, Math.ceil(total / PAGE));
    if (ui.page >= pages) ui.page = pages - 1;
    if (ui.page < 0) ui.page = 0;
    var start = ui.page * PAGE, page = rows.slice(start, start + PAGE);
    S.shown = page;

    var f = document.createDocumentFragment(), now = nowMs();
    page.forEach(function (r) {
      var dur = r.started_ms == null ? null : (r.ended_ms == null ? now : r.ended_ms) - r.started_ms;
      var errText = r.error != null ? (r.infra_class ? r.infra_class + ": " : "") + r.error : (r.infra_class || "");
      f.appendChild(el("tr", { id: "rollout-" + r.id, "data-rollout": r.id, "data-state": r.state }, [
        el("td", null, el("a", { href: "#/rollout/" + encId(r.id), text: r.id })),
        el("td", null, el("span", { class: "st st-" + r.state, text: r.state })),
        el("td", { class: "num", text: show(r.attempt) }),
        el("td", { class: "num", text: fmt3(r.reward) }),
        el("td", { class: "num", text: r._launches }),
        el("td", { class: "num", text: show(r.calls) }),
        el("td", { class: "num", text: show(r.tokens) }),
        el("td", { class: "num", text: fmtDur(dur) }),
        el("td", { class: "err", title: errText.length > 80 ? errText : null, text: truncate(errText, 80) })
      ]));
    });
    var table = $("rollouts");
    clear(table.tBodies[0]).appendChild(f);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      var s = th.getAttribute("data-sort");
      th.classList.toggle("sorted-asc", ui.sort === s && ui.dir === 1);
      th.classList.toggle("sorted-desc", ui.sort === s && ui.dir === -1);
    });
    if (ui.sort) { table.setAttribute("data-sort", ui.sort); table.setAttribute("data-dir", ui.dir === 1 ? "asc" : "desc"); }
    $("page-label").textContent = total ? (start + 1) + "-" + (start + page.length) + " of " + total : "0 of 0";
    $("page-prev").disabled = ui.page === 0;
    $("page-next").disabled = ui.page >= pages - 1;
    table.setAttribute("data-total", total);
    table.setAttribute("data-shown", page.length);
    renderTimeline();
    if (S.route.name === "run") ready();
  }

  function renderTimeline() {
    if ($("run-view").hidden) return; // drawn when the run view is shown again (needs the layout width)
    var box = $("timeline");
    var r = drawTimeline(box, S.shown, S.view.events, 900, true);
    document.body.setAttribute("data-timeline-width", Math.round(r.svg.getBoundingClientRect().width));
    document.body.setAttribute("data-launch-bars", r.bars);
  }

  // ---------------------------------------------------------------- rollout view
  function longText(cls, text) {
    text = text == null ? "" : String(text);
    var LIMIT = 2000, pre = el("pre", { class: cls }), nl = -1;
    for (var i = 0; i < 40 && nl < LIMIT; i++) { nl = text.indexOf("\n", nl + 1); if (nl < 0) break; }
    if (nl > 0 && nl < LIMIT) LIMIT = nl; // also collapse after 40 lines
    if (text.length <= LIMIT + 1) { pre.textContent = text; return pre; }
    var open = false, btn = el("button", { type: "button", class: "more" });
    function set() {
      pre.textContent = open ? text : text.slice(0, LIMIT) + "\u2026";
      btn.textContent = open ? "less" : "more (" + (text.length - LIMIT) + " more characters)";
    }
    btn.addEventListener("click", function () { open = !open; set(); });
    set();
    return el("div", { class: "long" }, [pre, btn]);
  }
  function toolCalls(list) {
    return (list || []).map(function (t) {
      return el("div", { class: "tool-call", text: show(t.name) + "(" + (typeof t.arguments === "string" ? t.arguments : show(t.arguments)) + ")" });
    });
  }
  function kv(id, pairs) {
    var dl = el("dl", { class: "kv", id: id });
    pairs.forEach(function (p) { if (p) append(dl, [el("dt", { text: p[0] }), el("dd", { text: p[1] })]); });
    return dl;
  }

  function launchItem(l, j) {
    var kind = j === 0 ? "started" : l.resumed ? "continued" : "started-over";
    var what = j === 0 ? "started" : l.resumed ? "relaunched on its saved session (continued)" : "started over";
    var bits = ["why: " + show(l.reason), "attempt " + show(l.attempt),
      fmtClock(l.start_ms) + " \u2192 " + (l.end_ms == null ? "now" : fmtClock(l.end_ms)) +
        (l.end_ms != null && l.start_ms != null ? " (" + fmtDur(l.end_ms - l.start_ms) + ")" : "")];
    if (l.pauses) bits.push("paused " + l.pauses + " times, " + fmtDur(l.paused_ms || 0) + " (paused in place, continued)");
    bits.push(l.end == null ? "still running" : "ended: " + l.end + (l.exit_code != null ? ", exit code " + l.exit_code : ""));
    if (l.note) bits.push("note: " + l.note);
    return el("li", { class: "launch-item", "data-kind": kind, "data-launch": l.id },
      [el("span", { class: "kind", text: what }), " ", el("code", { text: l.id }), " \u2014 " + bits.join(" \u00b7 ")]);
  }

  function callItem(c) {
    var rep = c.replayed_from != null;
    var tokens = (c.prompt_tokens != null || c.completion_tokens != null) ? show(c.prompt_tokens) + " + " + show(c.completion_tokens) + " tokens" : null;
    var head = el("div", { class: "call-head" }, [
      el("b", { text: "#" + show(c.seq) }),
      el("span", { class: "badge" + (c.status === "ok" ? "" : " bad"), text: show(c.status) }),
      rep ? el("span", { class: "badge replayed", title: "replayed from " + c.replayed_from, text: "replayed" }) : null,
      rep ? el("span", { class: "muted", text: "from " + c.replayed_from }) : null,
      el("span", { text: "model " + show(c.model) }),
      el("span", { text: "policy " + show(c.policy_version) }),
      el("span", { text: "latency " + fmtDur(c.latency_ms) }),
      tokens ? el("span", { text: tokens }) : null,
      el("span", { class: "muted", text: "attempt " + show(c.attempt) + " \u00b7 " + show(c.route) + " \u00b7 " + show(c.call_id) + " \u00b7 " + fmtClock(c.admitted_ms) })
    ]);
    var li = el("li", { class: "call", "data-call-id": c.call_id, "data-seq": c.seq, "data-replayed": rep ? "1" : "0" }, head);
    if (c.error) li.appendChild(el("div", { class: "error", text: c.error }));
    (c.added || []).forEach(function (m) {
      li.appendChild(el("div", { class: "msg-block", "data-role": m.role }, [el("span", { class: "role", text: show(m.role) }),
        m.text != null && m.text !== "" ? longText("msg", m.text) : null].concat(toolCalls(m.tool_calls))));
    });
    if (c.reply) {
      var r = c.reply;
      li.appendChild(el("div", { class: "reply" }, [el("span", { class: "role", text: "reply" }),
        r.reasoning ? el("details", { class: "reasoning" }, [el("summary", { text: "reasoning (" + String(r.reasoning).length + " characters)" }), longText("msg", r.reasoning)]) : null,
        r.text != null && r.text !== "" ? longText("msg", r.text) : null].concat(toolCalls(r.tool_calls))));
    }
    return li;
  }

  // Renders the rollout page from the run-view row (may be null) and the RolloutView (may be null).
  // A live refresh of the same rollout keeps the reader's scroll position.
  function renderRollout(id, d, note) {
    var old = $("rollout"), y = window.scrollY;
    buildRollout(id, d, note);
    if (old && old.getAttribute("data-rollout") === id) window.scrollTo(0, y);
    ready();
  }
  function buildRollout(id, d, note) {
    var root = clear($("rollout-view"));
    var row = S.byId ? S.byId[id] : null;
    var state = (d && d.state) || (row && row.state) || "unknown";
    var launches = (d && d.launches) || (row && row.launches) || [];
    root.appendChild(el("a", { id: "back", href: "#/", text: "\u2190 back to the run" }));
    var sec = el("section", { id: "rollout", "data-rollout": id, "data-state": state });
    root.appendChild(sec);
    sec.appendChild(el("h2", null, ["rollout ", el("code", { text: id }), " ", el("span", { class: "st st-" + state, text: state })]));
    if (note) sec.appendChild(el("p", { id: "no-detail", class: "note", text: note }));

    // result summary
    var res = (d && d.result) || null, rv = function (k) { return res && typeof res === "object" && res[k] != null ? res[k] : null; };
    var reward = rv("reward") != null ? rv("reward") : row ? row.reward : null;
    var started = rv("started_ms") != null ? rv("started_ms") : row && row.started_ms;
    var ended = rv("ended_ms") != null ? rv("ended_ms") : row && row.ended_ms;
    var dur = rv("duration_ms") != null ? rv("duration_ms") : started != null ? (ended != null ? ended : nowMs()) - started : null;
    sec.appendChild(el("h3", { text: "result" }));
    sec.appendChild(kv("result", [
      ["status", show(rv("status") != null ? rv("status") : state)],
      ["reward", typeof reward === "number" ? fmt3(reward) : show(reward)],
      ["attempt", show(rv("attempt") != null ? rv("attempt") : row && row.attempt)],
      ["error", show(rv("error") != null ? rv("error") : row && row.error) + (row && row.infra_class ? " (" + row.infra_class + ")" : "")],
      ["verdict", show(rv("verdict"))],
      ["duration", fmtDur(dur) + (started != null ? " (" + fmtClock(started) + " \u2192 " + (ended != null ? fmtClock(ended) : "now") + ")" : "")],
      row ? ["model calls / tokens", show(row.calls) + " / " + show(row.tokens)] : null,
      row && row.group != null ? ["group", row.group] : null
    ]));
    if (res) sec.appendChild(el("details", { class: "full-result" }, [el("summary", { text: "full result" }), longText("msg", JSON.stringify(res, null, 2))]));

    // launches and a small timeline
    sec.appendChild(el("h3", { text: "launches (" + launches.length + ")" }));
    var ol = el("ol", { id: "launches" });
    launches.forEach(function (l, j) { ol.appendChild(launchItem(l, j)); });
    sec.appendChild(ol);
    var tl = el("div", { id: "rollout-timeline" });
    sec.appendChild(tl);
    drawTimeline(tl, [{ id: id, state: state, launches: launches }], S.view ? S.view.events : [], 900);

    if (!d) return;

    // model calls, in the given order
    var calls = d.calls || [];
    sec.appendChild(el("h3", { text: "model calls (" + calls.length + ")" }));
    var cl = el("ol", { id: "calls" });
    calls.forEach(function (c) { cl.appendChild(callItem(c)); });
    sec.appendChild(cl);

    sec.appendChild(el("h3", { text: "checkpoints it was in" }));
    var ck = el("ul", { id: "rollout-checkpoints" });
    (d.checkpoints || []).forEach(function (c) { ck.appendChild(el("li", { "data-checkpoint": c.id, text: show(c.id) + " at " + fmtClock(c.at_ms) })); });
    if (!(d.checkpoints || []).length) ck.appendChild(el("li", { class: "muted", text: "none" }));
    sec.appendChild(ck);

    sec.appendChild(el("h3", { text: "output" }));
    var out = el("div", { id: "output" });
    (d.output || []).forEach(function (o) {
      out.appendChild(el("h4", { text: "launch " + show(o.launch) }));
      if (o.truncated) out.appendChild(el("p", { class: "note", text: "truncated: only the last part is kept" }));
      out.appendChild(el("pre", { class: "output", "data-launch": o.launch, text: o.text == null ? "" : o.text }));
    });
    if (!(d.output || []).length) out.appendChild(el("p", { class: "muted", text: "no output recorded" }));
    sec.appendChild(out);

    var rs = d.resources;
    sec.appendChild(el("h3", { text: "resources" }));
    sec.appendChild(rs ? kv("resources", [["cpu", fmtDur(rs.cpu_ms)], ["peak memory", fmtBytes(rs.memory_peak_bytes)], ["disk", fmtBytes(rs.disk_bytes)],
      ["network in / out", fmtBytes(rs.net_bytes_in) + " / " + fmtBytes(rs.net_bytes_out)],
      ["limits hit", (rs.limits_hit || []).length ? rs.limits_hit.join(", ") : "none"]]) : el("p", { id: "resources", class: "muted", text: "not measured" }));

    var tj = d.trajectory;
    sec.appendChild(el("h3", { text: "trajectory" }));
    sec.appendChild(tj ? kv("trajectory", [["trainable", tj.trainable ? "yes" : "no" + (tj.reason ? ": " + tj.reason : "")],
      tj.trainable && tj.reason ? ["note", tj.reason] : null,
      ["turns", show(tj.turns)], ["tool calls", show(tj.tool_calls)], ["tokens", show(tj.prompt_tokens) + " prompt + " + show(tj.completion_tokens) + " completion"],
      ["segments", show(tj.segments)], ["policy versions", (tj.policy_versions || []).join(", ") || "-"]]) : el("p", { id: "trajectory", class: "muted", text: "no trajectory" }));
  }

  // ---------------------------------------------------------------- routing
  function parseRoute() {
    var h = location.hash.replace(/^#/, "");
    var m = /^\/rollout\/([^&]*)/.exec(h);
    if (m) { try { return { name: "rollout", id: decodeURIComponent(m[1]) }; } catch (e) { return { name: "rollout", id: m[1] }; } }
    return { name: "run" };
  }

  function route() {
    S.route = parseRoute();
    showError(null);
    if (S.route.name === "rollout") {
      document.body.setAttribute("data-view", "rollout");
      unready();
      $("run-view").hidden = true;
      $("rollout-view").hidden = false;
      window.scrollTo(0, 0);
      S.detailText = null;
      if (S.mode === "report") openReportRollout(S.route.id);
      else { clear($("rollout-view")).appendChild(el("p", { class: "muted", text: "loading\u2026" })); refreshRollout(); }
    } else {
      document.body.setAttribute("data-view", "run");
      $("rollout-view").hidden = true;
      clear($("rollout-view"));
      if (!S.view) return;
      $("run-view").hidden = false;
      renderTimeline(); // the layout width may have changed while hidden
      if (S.chartsStale) renderCharts();
      ready();
    }
  }

  function openReportRollout(id) {
    var block = $("rp-detail-" + id), d = null, note = null;
    if (!block) note = "This report has no detail for this rollout.";
    else {
      try { d = JSON.parse(block.textContent); } catch (e) { note = "The detail of this rollout could not be read: " + e.message; }
    }
    if (!d && !(S.byId && S.byId[id])) note = "There is no rollout " + id + " in this report.";
    renderRollout(id, d, note);
  }

  // ---------------------------------------------------------------- live mode: token, fetch, stream
  function takeTokenFromHash() {
    var h = location.hash.replace(/^#/, "");
    var m = /(^|&)token=([^&]*)/.exec(h);
    if (!m) return null;
    var rest = h.slice(0, m.index) + h.slice(m.index + m[0].length);
    rest = rest.replace(/^&/, "");
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : "#/"));
    try { return decodeURIComponent(m[2]); } catch (e) { return m[2]; }
  }

  function showTokenForm(msg) {
    S.stopped = true;
    if (S.abort) S.abort.abort();
    $("live-state").hidden = true;
    $("token-form").hidden = false;
    $("token-msg").textContent = msg || "";
    $("token").focus();
  }

  function AuthError() { this.auth = true; }
  function HttpError(msg) { this.message = msg; }

  function api(path) {
    return fetch(path, { headers: { Authorization: "Bearer " + S.token }, cache: "no-store" }).then(function (resp) {
      if (resp.status === 401) throw new AuthError();
      return resp.text().then(function (text) {
        if (!resp.ok) {
          var msg = "HTTP " + resp.status;
          try { var j = JSON.parse(text); if (j && j.error) msg = (j.error.code ? j.error.code + ": " : "") + (j.error.message || ""); } catch (e) { /* not JSON */ }
          throw new HttpError(msg);
        }
        return text;
      });
    });
  }

  function handleFail(e) {
    if (e instanceof AuthError) { sessionStorage.removeItem("rp-token"); showTokenForm("wrong token"); return; }
    if (e instanceof HttpError) { showError(e.message); return; }
    throw e;
  }

  function refreshRun() {
    return api("/v1/run/view").then(function (text) {
      if (text === S.viewText) return;
      S.viewText = text;
      prepareView(JSON.parse(text));
      showError(null);
      $("run-view").hidden = S.route.name !== "run";
      renderRun();
    });
  }

  function refreshRollout() {
    var id = S.route.id;
    return api("/v1/rollouts/" + encId(id) + "/view").then(function (text) {
      if (S.route.name !== "rollout" || S.route.id !== id || text === S.detailText) return;
      S.detailText = text;
      renderRollout(id, JSON.parse(text), null);
    }).catch(function (e) {
      if (e instanceof HttpError && S.route.name === "rollout" && S.route.id === id) {
        renderRollout(id, null, "Could not load this rollout: " + e.message);
        return;
      }
      throw e;
    });
  }

  // Refresh at most once per second; "changed" events arriving meanwhile fold into one refresh.
  var R = { busy: false, pending: false, last: 0, timer: null };
  function scheduleRefresh() {
    if (R.busy) { R.pending = true; return; }
    if (R.timer) return;
    var wait = R.last + 1000 - Date.now();
    R.timer = setTimeout(doRefresh, Math.max(0, wait));
  }
  function doRefresh() {
    R.timer = null;
    if (S.stopped) return;
    R.busy = true;
    R.last = Date.now();
    var p = refreshRun().then(function () { if (S.route.name === "rollout") return refreshRollout(); });
    p.catch(function (e) {
      if (e instanceof AuthError || e instanceof HttpError) handleFail(e);
      // network errors are handled by the stream loop
    }).then(function () {
      R.busy = false;
      if (R.pending) { R.pending = false; scheduleRefresh(); }
    });
  }

  function setLive(state, text) {
    var n = $("live-state");
    n.hidden = false;
    n.setAttribute("data-state", state);
    n.textContent = text;
  }
  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }

  function handleMessage(block) {
    var ev = "message";
    block.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) ev = line.slice(6).trim();
    });
    if (ev === "changed") scheduleRefresh();
  }

  // Reads the SSE stream with fetch (EventSource cannot send the Authorization header).
  function streamOnce() {
    S.abort = new AbortController();
    return fetch("/v1/run/live", { headers: { Authorization: "Bearer " + S.token, Accept: "text/event-stream" }, signal: S.abort.signal, cache: "no-store" })
      .then(function (resp) {
        if (resp.status === 401) throw new AuthError();
        if (!resp.ok || !resp.body) throw new Error("stream answered " + resp.status);
        setLive("connected", "live");
        scheduleRefresh(); // catch up on anything missed while disconnected
        var reader = resp.body.getReader(), dec = new TextDecoder(), buf = "";
        function pump() {
          return reader.read().then(function (r) {
            if (r.done) return;
            buf += dec.decode(r.value, { stream: true }).replace(/\r\n/g, "\n");
            var i;
            while ((i = buf.indexOf("\n\n")) >= 0) { handleMessage(buf.slice(0, i)); buf = buf.slice(i + 2); }
            return pump();
          });
        }
        return pump();
      });
  }

  function streamLoop() {
    if (S.stopped) return;
    streamOnce().catch(function (e) { return e; }).then(function (e) {
      if (S.stopped) return;
      if (e instanceof AuthError) { handleFail(e); return; }
      // The stream ended or failed: has the run (and its server) gone?
      return api("/v1/run/view").then(function () { return false; }, function (err) {
        if (err instanceof AuthError) { handleFail(err); return "stop"; }
        return !(err instanceof HttpError) && S.view && S.view.summary && S.view.summary.ended_ms != null;
      }).then(function (ended) {
        if (ended === "stop" || S.stopped) return;
        if (ended) { setLive("ended", "the run has ended"); S.stopped = true; return; }
        setLive("reconnecting", "reconnecting\u2026");
        return sleep(2000).then(streamLoop);
      });
    });
  }

  function startLive() {
    S.stopped = false;
    $("token-form").hidden = true;
    setLive("reconnecting", "connecting\u2026");
    unready();
    refreshRun().then(function () {
      route();
      streamLoop();
    }, function (e) {
      if (e instanceof AuthError) { handleFail(e); return; }
      if (e instanceof HttpError) showError(e.message);
      setLive("reconnecting", "cannot load the run, retrying\u2026");
      setTimeout(function () { if (!S.stopped) startLive(); }, 2000);
    });
  }

  // ---------------------------------------------------------------- start
  function start() {
    window.addEventListener("hashchange", function () {
      if (S.mode === "live" && /(^#|&)token=/.test(location.hash)) {
        var t = takeTokenFromHash();
        if (t) { S.token = t; sessionStorage.setItem("rp-token", t); }
      }
      route();
    });
    var rt = null;
    window.addEventListener("resize", function () {
      clearTimeout(rt);
      rt = setTimeout(function () {
        if (!S.view) return;
        if (!$("run-view").hidden) { renderTimeline(); renderCharts(); }
      }, 200);
    });

    if (S.mode === "report") {
      var block = $("rp-view");
      if (!block) { showError("This report has no run data."); return; }
      try { prepareView(JSON.parse(block.textContent)); } catch (e) { showError("The run data could not be read: " + e.message); return; }
      S.route = parseRoute();
      $("run-view").hidden = S.route.name !== "run";
      renderRun();
      route();
      return;
    }

    $("token-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var t = $("token").value.trim();
      if (!t) return;
      S.token = t;
      sessionStorage.setItem("rp-token", t);
      startLive();
    });
    var t = takeTokenFromHash();
    if (t) sessionStorage.setItem("rp-token", t);
    S.token = t || sessionStorage.getItem("rp-token");
    S.route = parseRoute();
    if (!S.token) { showTokenForm(""); return; }
    startLive();
  }

  start();
})();
