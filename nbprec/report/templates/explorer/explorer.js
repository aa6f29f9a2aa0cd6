/* nbprec offline report: the operator explorer (threshold, filters, sorting, paging, trend, inspector).
   Runs from the page alone: no kernel, no network. Every status comes precomputed by nbprec's core for each
   slider position; this script only looks them up, filters, sorts, pages and draws. Names are set as text. */
(function () {
  "use strict";
  var root = document.currentScript && document.currentScript.parentElement;
  if (!root || root.dataset.state !== "loading") { return; }
  var SVG = "http://www.w3.org/2000/svg";
  var PAGE = 25;
  var W = 900, H = 230, ML = 62, MR = 12, MT = 14, MB = 34;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    return e;
  }
  function num(v) {
    if (v === null || v === undefined) { return NaN; }
    if (v === "inf") { return Infinity; }
    if (v === "-inf") { return -Infinity; }
    return typeof v === "number" ? v : NaN;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return ""; }
    if (typeof v === "boolean") { return v ? "yes" : "no"; }
    if (typeof v !== "number") { return String(v); }
    if (Number.isInteger(v)) { return String(v); }
    var a = Math.abs(v);
    return a >= 1e-3 && a < 1e6 ? String(Number(v.toPrecision(6))) : v.toExponential(3);
  }
  function unpack(b64) {
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }

  function build(d) {
    var n = d.ops.op.length;
    var names = d.ops.op.map(function (s) { return String(s).toLowerCase(); });
    var modules = (d.ops.module || []).map(function (s) { return String(s || "").toLowerCase(); });
    var metricCol = "out_" + d.metric;
    var s = { k: d.start, sort: "order", asc: true, page: 0, name: "", module: "", type: "", status: "",
              origin: "", selected: d.culprit };
    var cache = null;

    function code(i) { return d.codes[d.states[s.k].charCodeAt(i) - 48]; }
    function value(col, i) {
      if (col === "status") { return code(i)[0]; }
      if (col === "origin") { return code(i)[1]; }
      return d.ops[col] ? d.ops[col][i] : null;
    }
    var numeric = {};
    d.columns.forEach(function (c) {
      numeric[c] = c !== "status" && c !== "origin" && (d.ops[c] || []).some(function (v) {
        return typeof v === "number";
      });
    });

    // -- controls ------------------------------------------------------------------------------------
    var controls = el("div", { "class": "nbprec-x-controls" });
    var slider = el("input", { type: "range", min: "0", max: String(d.thresholds.length - 1), step: "1",
                               value: String(s.k), "class": "nbprec-x-threshold",
                               "aria-label": "threshold on " + d.metric });
    var sliderText = el("span", { "class": "nbprec-x-threshold-value" });
    var lab = el("label", {}, "threshold " + d.metric + (d.lower_is_worse ? " \u2265 " : " \u2264 "));
    lab.appendChild(slider); lab.appendChild(sliderText); controls.appendChild(lab);
    function textFilter(label, cls) {
      var l = el("label", {}, label), input = el("input", { type: "search", "class": cls, placeholder: "substring" });
      l.appendChild(input); controls.appendChild(l); return input;
    }
    function choice(label, cls, options) {
      var l = el("label", {}, label), sel = el("select", { "class": cls });
      sel.appendChild(el("option", { value: "" }, "all"));
      options.forEach(function (o) { sel.appendChild(el("option", { value: o }, o || "(none)")); });
      l.appendChild(sel); controls.appendChild(l); return sel;
    }
    function distinct(values) {
      return Array.from(new Set(values.map(function (v) { return v === null ? "" : String(v); }))).sort();
    }
    var nameIn = textFilter("op", "nbprec-x-filter-name");
    var moduleIn = textFilter("module", "nbprec-x-filter-module");
    var typeSel = choice("type", "nbprec-x-filter-type", distinct(d.ops.op_type || []));
    var statusSel = choice("status", "nbprec-x-filter-status", ["fail", "pass", "n/a"]);
    var originSel = choice("origin", "nbprec-x-filter-origin",
                           distinct(d.codes.map(function (c) { return c[1]; })).filter(Boolean));
    var firstBtn = el("button", { type: "button", "class": "nbprec-x-goto-first" }, "go to first failing op");
    controls.appendChild(firstBtn);
    var summary = el("p", { "class": "nbprec-x-summary", role: "status" });

    // -- table, pager, trend, inspector ------------------------------------------------------------
    var main = el("div", { "class": "nbprec-x-main" });
    var left = el("div", { "class": "nbprec-x-left" });
    var trend = el("div", { "class": "nbprec-x-trend" });
    var wrap = el("div", { "class": "nbprec-x-table-wrap" });
    var table = el("table", { "class": "nbprec-x-table" });
    var thead = el("thead"), tbody = el("tbody"), headRow = el("tr");
    d.columns.forEach(function (c) {
      var th = el("th", { "data-col": c, "aria-sort": "none" }), b = el("button", { type: "button" }, c.replace(/_/g, "_\u200b"));
      b.addEventListener("click", function () {
        if (s.sort === c) { s.asc = !s.asc; } else { s.sort = c; s.asc = !(numeric[c] && c !== "order" &&
                                                                                !/cosine$/.test(c)); }
        s.page = 0; cache = null; render();
      });
      th.appendChild(b); headRow.appendChild(th);
    });
    thead.appendChild(headRow); table.appendChild(thead); table.appendChild(tbody); wrap.appendChild(table);
    var pager = el("div", { "class": "nbprec-x-pager" });
    var prev = el("button", { type: "button", "class": "nbprec-x-prev" }, "\u2190 previous page");
    var pageText = el("span", { "class": "nbprec-x-page" });
    var next = el("button", { type: "button", "class": "nbprec-x-next" }, "next page \u2192");
    pager.appendChild(prev); pager.appendChild(pageText); pager.appendChild(next);
    var inspector = el("div", { "class": "nbprec-x-inspector", "aria-live": "polite" });
    left.appendChild(trend); left.appendChild(pager); left.appendChild(wrap);
    main.appendChild(left); main.appendChild(inspector);
    root.appendChild(controls); root.appendChild(summary); root.appendChild(main);

    // -- the filtered, sorted op positions (recomputed only when the threshold, filters or sort change)
    function rows() {
      if (cache) { return cache; }
      var out = [];
      for (var i = 0; i < n; i++) {
        if (s.name && names[i].indexOf(s.name) < 0) { continue; }
        if (s.module && modules[i].indexOf(s.module) < 0) { continue; }
        if (s.type && String(d.ops.op_type[i]) !== s.type) { continue; }
        if (s.status || s.origin) {
          var c = code(i);
          if (s.status && c[0] !== s.status) { continue; }
          if (s.origin && c[1] !== s.origin) { continue; }
        }
        out.push(i);
      }
      if (s.sort !== "order" || !s.asc) {
        var col = s.sort, sign = s.asc ? 1 : -1, isNum = numeric[col] || col === "order";
        var idx = out.map(function (_, j) { return j; });
        if (isNum) {  // typed keys, NaN (no value) last in either direction
          var keys = new Float64Array(out.length);
          out.forEach(function (i, j) { var v = num(value(col, i)); keys[j] = isNaN(v) ? sign * Infinity : v; });
          idx.sort(function (a, b) { return sign * (keys[a] - keys[b]) || a - b; });
        } else {
          var texts = out.map(function (i) { var v = value(col, i); return v === null ? "" : String(v); });
          idx.sort(function (a, b) {
            var x = texts[a], y = texts[b];
            return x === y ? a - b : (x < y ? -sign : sign);
          });
        }
        out = idx.map(function (j) { return out[j]; });
      }
      cache = out;
      return out;
    }

    function marks(i) {
      var f = d.facts[s.k], m = [];
      if (f.first === i) { m.push(["first", "first failing"]); }
      if (f.introduced === i) { m.push(["introduced", "introduced"]); }
      if (f.onset === i) { m.push(["onset", "onset"]); }
      return m;
    }

    function renderTable() {
      var list = rows(), pages = Math.max(1, Math.ceil(list.length / PAGE));
      s.page = Math.min(Math.max(s.page, 0), pages - 1);
      var frag = document.createDocumentFragment();
      list.slice(s.page * PAGE, (s.page + 1) * PAGE).forEach(function (i) {
        var tr = el("tr", { "data-pos": String(i), tabindex: "0" });
        if (code(i)[0] === "fail") { tr.classList.add("fail"); }
        if (i === s.selected) { tr.classList.add("selected"); tr.setAttribute("aria-selected", "true"); }
        d.columns.forEach(function (c) {
          var v = value(c, i), td = el("td", {}, fmt(v));
          if (numeric[c]) { td.className = "num"; }
          if (c === "op") {
            td.className = "op"; td.title = String(v);
            marks(i).forEach(function (m) { td.appendChild(el("span", { "class": "nbprec-x-mark " + m[0] }, m[1])); });
          }
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      tbody.replaceChildren(frag);
      pageText.textContent = "page " + (s.page + 1) + " of " + pages + " (" + list.length + " of " + n + " ops)";
      prev.disabled = s.page === 0; next.disabled = s.page >= pages - 1;
      headRow.querySelectorAll("th").forEach(function (th) {
        var c = th.getAttribute("data-col");
        th.setAttribute("aria-sort", c === s.sort && !(c === "order" && s.asc) ? (s.asc ? "ascending" : "descending")
                                                                              : "none");
      });
    }

    function opName(i) { return i === null || i === undefined ? "none" : String(d.ops.op[i]); }

    function renderSummary() {
      var t = d.thresholds[s.k], f = d.facts[s.k];
      sliderText.textContent = fmt(t) + (s.k === d.start ? " (rule " + d.rule + ")" : "");
      summary.replaceChildren();
      summary.appendChild(el("b", { "class": "nbprec-x-flagged" }, f.flagged + " failing ops"));
      summary.appendChild(document.createTextNode(
        " under " + d.metric + (d.lower_is_worse ? " \u2265 " : " \u2264 ") + fmt(t) + "; first failing op: " +
        opName(f.first) + "; introduced: " + opName(f.introduced) + "; onset: " + opName(f.onset) + "."));
      firstBtn.disabled = f.first === null;
    }

    // -- trend: the metric along execution order on a log scale (1 - cosine for cosine) -----------------
    function tv(v) {
      v = num(v);
      if (!isFinite(v)) { return v === Infinity ? 1e9 : NaN; }
      v = d.lower_is_worse ? 1 - v : Math.abs(v);
      return Math.log10(Math.max(v, 1e-9));
    }
    var ys = d.ops[metricCol].map(tv), yLo = Infinity, yHi = -Infinity;
    ys.forEach(function (y) { if (isFinite(y) && y < 1e8) { yLo = Math.min(yLo, y); yHi = Math.max(yHi, y); } });
    d.thresholds.forEach(function (t) { var y = tv(t); yLo = Math.min(yLo, y); yHi = Math.max(yHi, y); });
    if (!isFinite(yLo)) { yLo = -9; yHi = 0; }
    yLo = Math.floor(yLo); yHi = Math.max(Math.ceil(yHi), yLo + 1);
    function px(i) { return ML + (n > 1 ? i / (n - 1) : 0.5) * (W - ML - MR); }
    function py(y) { return MT + (1 - (Math.min(Math.max(y, yLo), yHi) - yLo) / (yHi - yLo)) * (H - MT - MB); }
    var plot = svg("svg", { width: String(W), height: String(H), viewBox: "0 0 " + W + " " + H,
                            role: "img", "aria-label": "error trend" });
    var axis = svg("g"), line = svg("path", { fill: "none", stroke: "#1f77b4", "stroke-width": "1" });
    var thresholdLine = svg("line", { stroke: "#c62828", "stroke-dasharray": "4 3", x1: String(ML),
                                      x2: String(W - MR), "class": "threshold" });
    var dots = svg("g", { "class": "fails" }), vlines = svg("g", { "class": "marks" });
    for (var e = yLo; e <= yHi; e++) {
      axis.appendChild(svg("line", { x1: String(ML), x2: String(W - MR), y1: String(py(e)), y2: String(py(e)),
                                     stroke: "#eee" }));
      var lt = svg("text", { x: String(ML - 4), y: String(py(e) + 4), "text-anchor": "end", "font-size": "11" });
      lt.textContent = "1e" + e; axis.appendChild(lt);
    }
    var xl = svg("text", { x: String((ML + W) / 2), y: String(H - 4), "text-anchor": "middle", "font-size": "11" });
    xl.textContent = "execution order (" + n + " ops); dashed: threshold; click a dot or anywhere to select";
    var yl = svg("text", { x: "12", y: String(H / 2), "font-size": "11", "text-anchor": "middle",
                           transform: "rotate(-90 12 " + H / 2 + ")" });
    yl.textContent = (d.lower_is_worse ? "1 - " + d.metric : d.metric) + " (log)";
    axis.appendChild(xl); axis.appendChild(yl);
    (function () {  // the line: every op, or min/max per pixel column for long runs
      var parts = [], cols = W - ML - MR;
      if (n <= 2 * cols) {
        ys.forEach(function (y, i) { if (isFinite(y)) { parts.push((parts.length ? "L" : "M") + px(i).toFixed(1) + "," + py(y).toFixed(1)); } });
      } else {
        for (var c = 0; c < cols; c++) {
          var a = Math.floor(c * n / cols), b = Math.floor((c + 1) * n / cols), lo = Infinity, hi = -Infinity;
          for (var i = a; i < b; i++) { if (isFinite(ys[i])) { lo = Math.min(lo, ys[i]); hi = Math.max(hi, ys[i]); } }
          if (isFinite(lo)) { parts.push((parts.length ? "L" : "M") + (ML + c) + "," + py(lo).toFixed(1) + "L" + (ML + c) + "," + py(hi).toFixed(1)); }
        }
      }
      line.setAttribute("d", parts.join(""));
    })();
    plot.appendChild(axis); plot.appendChild(line); plot.appendChild(thresholdLine); plot.appendChild(vlines);
    plot.appendChild(dots); trend.appendChild(plot);
    plot.addEventListener("click", function (ev) {
      var t = ev.target.getAttribute && ev.target.getAttribute("data-pos");
      if (t === null || t === undefined) {
        var r = plot.getBoundingClientRect(), x = (ev.clientX - r.left) * W / r.width;
        t = Math.round((x - ML) / (W - ML - MR) * (n - 1));
      }
      select(Math.min(Math.max(Number(t), 0), n - 1), true);
    });

    function renderTrend() {
      var y = py(tv(d.thresholds[s.k])), frag = document.createDocumentFragment(), fails = [];
      thresholdLine.setAttribute("y1", String(y)); thresholdLine.setAttribute("y2", String(y));
      for (var i = 0; i < n; i++) { if (code(i)[0] === "fail") { fails.push(i); } }
      var step = Math.max(1, Math.ceil(fails.length / 3000));
      for (var j = 0; j < fails.length; j += step) {
        var p = fails[j], c = svg("circle", { cx: px(p).toFixed(1), cy: py(isFinite(ys[p]) ? ys[p] : yHi).toFixed(1),
                                              r: "3", "class": "dot fail", "data-pos": String(p) });
        var tip = svg("title"); tip.textContent = String(d.ops.op[p]); c.appendChild(tip);
        frag.appendChild(c);
      }
      dots.replaceChildren(frag);
      dots.setAttribute("data-count", String(fails.length));
      renderMarks();
    }

    function renderMarks() {
      var f = d.facts[s.k], frag = document.createDocumentFragment();
      [["first", f.first, "#c62828"], ["introduced", f.introduced, "#6a1b9a"], ["onset", f.onset, "#ef6c00"],
       ["selected", s.selected, "#2e7d32"]].forEach(function (m) {
        if (m[1] === null || m[1] === undefined) { return; }
        var x = px(m[1]).toFixed(1);
        frag.appendChild(svg("line", { x1: x, x2: x, y1: String(MT), y2: String(H - MB), stroke: m[2],
                                       "stroke-width": m[0] === "selected" ? "2" : "1", "class": "mark " + m[0] }));
      });
      vlines.replaceChildren(frag);
    }

    // -- inspector: precomputed tensor details for what matters, the op's row for the rest -----------
    function renderInspector() {
      inspector.replaceChildren();
      var i = s.selected;
      if (i === null || i === undefined) {
        inspector.appendChild(el("p", {}, "Click a row or a point of the trend to inspect an op."));
        return;
      }
      var name = String(d.ops.op[i]), head = el("h4", { "class": "nbprec-x-selected" });
      head.appendChild(document.createTextNode("Selected op: "));
      head.appendChild(el("code", {}, name));
      var kv = el("table", { "class": "nbprec-x-kv" });
      Object.keys(d.ops).concat(["status", "origin"]).forEach(function (c) {
        if (c === "op") { return; }
        var tr = el("tr"); tr.appendChild(el("th", {}, c)); tr.appendChild(el("td", {}, fmt(value(c, i))));
        kv.appendChild(tr);
      });
      if (Object.prototype.hasOwnProperty.call(d.inspected, name)) {
        var box = el("div", { "class": "nbprec-x-details" });
        box.innerHTML = d.inspected[name];  // nbprec's own escaped markup (the dashboard inspector's static form)
        box.querySelectorAll("svg[width][height]:not([viewBox])").forEach(function (g) {  // let wide plots shrink
          g.setAttribute("viewBox", "0 0 " + parseFloat(g.getAttribute("width")) + " " +
                         parseFloat(g.getAttribute("height")));
        });
        inspector.appendChild(box);
      } else {
        inspector.appendChild(head);
        inspector.appendChild(kv);
        inspector.appendChild(el("p", { "class": "nbprec-x-note" },
          "Tensor details are precomputed for the culprit, the first failing, introduced and onset ops and the " +
          "worst ops; open the report notebook with a kernel (or nbprec.explore) to inspect this one."));
      }
    }

    function render() { renderSummary(); renderTable(); renderTrend(); renderInspector(); linkGraph(); }

    function select(i, reveal) {
      s.selected = i;
      if (reveal) {
        var list = rows(), at = list.indexOf(i);
        if (at < 0) { clearFilters(); list = rows(); at = list.indexOf(i); }
        s.page = Math.floor(at / PAGE);
      }
      renderTable(); renderMarks(); renderInspector(); linkGraph();
      if (reveal) {
        var row = tbody.querySelector("tr.selected");
        if (row && row.scrollIntoView) { row.scrollIntoView({ block: "nearest" }); }
      }
    }
    function clearFilters() {
      s.name = s.module = s.type = s.status = s.origin = "";
      nameIn.value = moduleIn.value = typeSel.value = statusSel.value = originSel.value = "";
      cache = null;
    }

    // -- the culprit's subgraph (a cytoscape widget elsewhere in the page): a node click selects its op ----
    var cy = null;
    function linkGraph() {
      if (!cy) { return; }
      cy.nodes(":selected").unselect();
      if (s.selected !== null && s.selected !== undefined) {
        var node = cy.getElementById(String(d.ops.op[s.selected]));
        if (node && node.length) { node.select(); }
      }
    }
    function findGraph(tries) {
      var host = Array.prototype.find.call(document.querySelectorAll("div"), function (x) {
        return x._cyreg && x._cyreg.cy;
      });
      if (host) {
        cy = host._cyreg.cy;
        cy.on("tap", "node", function (ev) {
          var at = d.ops.op.indexOf(ev.target.id());
          if (at >= 0) { select(at, true); }
        });
        root.dataset.graph = "linked";
        linkGraph();
      } else if (tries > 0) {
        setTimeout(function () { findGraph(tries - 1); }, 500);
      }
    }

    // -- events ---------------------------------------------------------------------------------------
    slider.addEventListener("input", function () {
      s.k = Number(slider.value); cache = null; renderSummary(); renderTable(); renderTrend();
    });
    function onFilter() {
      s.name = nameIn.value.toLowerCase(); s.module = moduleIn.value.toLowerCase(); s.type = typeSel.value;
      s.status = statusSel.value; s.origin = originSel.value; s.page = 0; cache = null; renderTable();
    }
    [nameIn, moduleIn].forEach(function (x) { x.addEventListener("input", onFilter); });
    [typeSel, statusSel, originSel].forEach(function (x) { x.addEventListener("change", onFilter); });
    prev.addEventListener("click", function () { s.page -= 1; renderTable(); });
    next.addEventListener("click", function () { s.page += 1; renderTable(); });
    firstBtn.addEventListener("click", function () {
      var f = d.facts[s.k].first;
      if (f !== null) { select(f, true); }
    });
    function rowEvent(ev) {
      var tr = ev.target.closest && ev.target.closest("tr[data-pos]");
      if (tr && (ev.type === "click" || ev.key === "Enter")) { select(Number(tr.getAttribute("data-pos")), false); }
    }
    tbody.addEventListener("click", rowEvent);
    tbody.addEventListener("keydown", rowEvent);

    if (s.selected !== null && s.selected !== undefined) { s.page = Math.floor(rows().indexOf(s.selected) / PAGE); }
    render();
    root.dataset.state = "ready";
    findGraph(60);
  }

  unpack(root.querySelector(".nbprec-explorer-data").textContent.trim()).then(build).catch(function (err) {
    root.dataset.state = "error";
    root.appendChild(el("p", { "class": "nbprec-x-error" }, "The operator explorer could not start: " + err));
  });
})();
