/* profkit report: builds the kernel table and the charts from the page's JSON data.
 * Every string from a capture is put in the page with textContent (never innerHTML), and the
 * charts draw on canvas. Chart.js (vendored, MIT) draws the charts where the page has it. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("profkit-data").textContent);
  var PAGE_SIZE = 50;
  // The colours: palette.py's, as the page's CSS variables (one meaning per colour, page-wide).
  var ROOT_STYLE = getComputedStyle(document.documentElement);
  function C(concept, key) { return ROOT_STYLE.getPropertyValue("--c-" + concept + "-" + key).trim(); }
  function precColor(p) { return C("precision", p) || C("precision", "unknown"); }
  var TC = {tensor: C("tc", "tensor"), tensor_other: C("tc", "tensor_other"), matrix_cuda: C("tc", "matrix_cuda"),
            cuda: C("tc", "cuda"), mixed: C("tc", "mixed"), unknown: C("tc", "unknown")};
  var TC_LABEL = {tensor: "tensor cores", tensor_other: "other kernels on tensor cores",
                  matrix_cuda: "matrix work on CUDA cores", cuda: "CUDA cores (no matrix math)",
                  mixed: "partly on tensor cores", unknown: "unknown"};
  // Narrow windows: long names are cut shorter, in the middle.
  var NARROW = window.innerWidth < 900;

  // ---------------------------------------------------------------- formatting
  function fmtNs(ns) {
    if (ns === null || ns === undefined) return "-";
    var a = Math.abs(ns), s = ns < 0 ? "-" : "";
    if (a >= 1e6) return s + (a / 1e6).toLocaleString("en-US", {minimumFractionDigits: 3, maximumFractionDigits: 3}) + " ms";
    if (a >= 1e3) return s + (a / 1e3).toLocaleString("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1}) + " us";
    return s + Math.round(a) + " ns";
  }
  function fmtNum(n, digits) {
    if (n === null || n === undefined) return "-";
    return Number(n).toLocaleString("en-US", {maximumFractionDigits: digits === undefined ? 1 : digits});
  }
  function fmtPct(p) { return p === null || p === undefined ? "-" : p.toFixed(1) + "%"; }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function badge(kind, text, title) {
    var b = el("span", {"class": "badge " + kind, title: title}, text);
    return b;
  }
  function cut(s, n) { s = String(s || ""); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  // Cut in the middle: the start (the kernel's kind) and the end (its tile, layout, variant),
  // which tell two kernels apart, both stay.
  function cutMiddle(s, n) {
    s = String(s || "");
    if (s.length <= n) return s;
    var head = Math.ceil((n - 1) * 0.6), tail = n - 1 - head;
    return s.slice(0, head) + "…" + s.slice(s.length - tail);
  }
  // A legend of coloured swatches under a chart whose bars' colours carry a meaning.
  function legend(canvasId, items) {
    var c = document.getElementById(canvasId);
    if (!c) return;
    var fig = c.closest("figure"), ul = el("ul", {"class": "legend", "data-for": canvasId});
    items.forEach(function (it) {
      var li = el("li"), sw = el("span", {"class": "swatch", "aria-hidden": "true"});
      sw.style.background = it[1];
      li.appendChild(sw); li.appendChild(document.createTextNode(it[0])); ul.appendChild(li);
    });
    fig.appendChild(ul);
  }

  // ---------------------------------------------------------------- a sortable, filterable, paged table
  // spec: {columns: [{key, label, num, fmt(row) -> text|Node, sortKey(row)}], rows, sort: {key, desc},
  //        filters: [{key, label, values(row) -> [..]}], text(row) -> searchable text,
  //        details(row) -> Node | null, rowClass(row)}
  function makeTable(host, spec) {
    var state = {sort: spec.sort || null, text: "", filters: {}, page: 0, open: {}};
    var controls = el("div", {"class": "controls"});
    var search = el("input", {type: "search", "class": "filter-text", placeholder: spec.placeholder || "filter by name",
                              "aria-label": spec.placeholder || "filter by name"});
    controls.appendChild(search);
    (spec.filters || []).forEach(function (f) {
      var seen = {};
      spec.rows.forEach(function (r) { f.values(r).forEach(function (v) { seen[v] = (seen[v] || 0) + 1; }); });
      var sel = el("select", {"class": "filter-select", "data-filter": f.key, "aria-label": f.label});
      sel.appendChild(el("option", {value: ""}, f.label + ": all"));
      Object.keys(seen).sort().forEach(function (v) { sel.appendChild(el("option", {value: v}, f.label + ": " + v + " (" + seen[v] + ")")); });
      sel.addEventListener("change", function () { state.filters[f.key] = sel.value; state.page = 0; draw(); });
      controls.appendChild(sel);
    });
    var info = el("span", {"class": "table-info"});
    controls.appendChild(info);
    var lows = spec.columns.filter(function (c) { return c.low; });
    var table = el("table", {"class": "data"});
    if (lows.length) {  // a narrow window hides the low-value columns; this shows them again
      var lab = el("label", {"class": "all-columns", title: "columns hidden in a narrow window: " +
                              lows.map(function (c) { return c.label; }).join(", ")});
      var box = el("input", {type: "checkbox", "class": "show-all-columns"});
      box.addEventListener("change", function () { table.classList.toggle("all-columns", box.checked); });
      lab.appendChild(box); lab.appendChild(document.createTextNode(" all columns"));
      controls.appendChild(lab);
    }
    host.appendChild(controls);
    var thead = el("thead"), headRow = el("tr");
    spec.columns.forEach(function (c) {
      var th = el("th", {"data-key": c.key, "class": (c.num ? "num " : "") + (c.low ? "low " : "") + "sortable", tabindex: "0", scope: "col"});
      th.appendChild(el("span", null, c.label));
      if (c.title) th.title = c.title;
      function sortBy() {
        if (state.sort && state.sort.key === c.key) state.sort = {key: c.key, desc: !state.sort.desc};
        else state.sort = {key: c.key, desc: !!c.num};
        state.page = 0; draw();
      }
      th.addEventListener("click", sortBy);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(); } });
      headRow.appendChild(th);
    });
    thead.appendChild(headRow); table.appendChild(thead);
    var tbody = el("tbody"); table.appendChild(tbody);
    var wrap = el("div", {"class": "table-wrap"}); wrap.appendChild(table); host.appendChild(wrap);
    var pager = el("div", {"class": "pager"});
    var prev = el("button", {type: "button", "class": "prev"}, "‹ previous"), next = el("button", {type: "button", "class": "next"}, "next ›");
    var pageInfo = el("span", {"class": "page-info"});
    prev.addEventListener("click", function () { state.page -= 1; draw(); });
    next.addEventListener("click", function () { state.page += 1; draw(); });
    pager.appendChild(prev); pager.appendChild(pageInfo); pager.appendChild(next); host.appendChild(pager);
    var timer = null;
    search.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { state.text = search.value.toLowerCase(); state.page = 0; draw(); }, 120);
    });
    var texts = spec.rows.map(function (r) { return spec.text(r).toLowerCase(); });
    spec.rows.forEach(function (r, i) { r.__i = i; });

    function sortValue(c, r) { return c.sortKey ? c.sortKey(r) : r[c.key]; }
    function visible() {
      var rows = spec.rows.filter(function (r) {
        if (state.text && texts[r.__i].indexOf(state.text) < 0) return false;
        for (var k in state.filters) {
          if (!state.filters[k]) continue;
          var f = spec.filters.filter(function (x) { return x.key === k; })[0];
          if (f.values(r).indexOf(state.filters[k]) < 0) return false;
        }
        return true;
      });
      if (state.sort) {
        var c = spec.columns.filter(function (x) { return x.key === state.sort.key; })[0], dir = state.sort.desc ? -1 : 1;
        rows = rows.map(function (r) { return [sortValue(c, r), r]; });
        rows.sort(function (a, b) {
          var x = a[0], y = b[0];
          if (x === y) return a[1].__i - b[1].__i;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * dir;
        });
        rows = rows.map(function (p) { return p[1]; });
      }
      return rows;
    }
    function draw() {
      var rows = visible(), pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
      state.page = Math.max(0, Math.min(state.page, pages - 1));
      var start = state.page * PAGE_SIZE, shown = rows.slice(start, start + PAGE_SIZE);
      headRow.querySelectorAll("th").forEach(function (th) {
        var on = state.sort && th.getAttribute("data-key") === state.sort.key;
        th.setAttribute("aria-sort", on ? (state.sort.desc ? "descending" : "ascending") : "none");
      });
      tbody.textContent = "";
      shown.forEach(function (r) {
        var tr = el("tr", {"class": "row " + (spec.rowClass ? spec.rowClass(r) : ""), "data-index": r.__i});
        spec.columns.forEach(function (c) {
          var td = el("td", {"class": (c.num ? "num " : "") + (c.low ? "low " : "") + (c.cls || ""), "data-key": c.key});
          var v = c.fmt ? c.fmt(r) : r[c.key];
          if (v instanceof Node) td.appendChild(v); else td.textContent = v === null || v === undefined ? "-" : String(v);
          tr.appendChild(td);
        });
        tbody.appendChild(tr);
        if (spec.details) {
          tr.classList.add("expandable");
          tr.tabIndex = 0;
          var toggle = function () { state.open[r.__i] = !state.open[r.__i]; draw(); };
          tr.addEventListener("click", toggle);
          tr.addEventListener("keydown", function (e) { if (e.key === "Enter") toggle(); });
          if (state.open[r.__i]) {
            tr.classList.add("open");
            var dtr = el("tr", {"class": "details"}), dtd = el("td", {colspan: spec.columns.length});
            dtd.appendChild(spec.details(r)); dtr.appendChild(dtd); tbody.appendChild(dtr);
          }
        }
      });
      info.textContent = rows.length === spec.rows.length ? spec.rows.length + " rows"
        : rows.length + " of " + spec.rows.length + " rows match";
      pageInfo.textContent = rows.length ? "rows " + (start + 1) + "–" + (start + shown.length) + " of " + rows.length
        : "no rows match";
      prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
    }
    draw();
    return {draw: draw, state: state};
  }

  // ---------------------------------------------------------------- the run page
  // Where a kernel group ran, as its palette key: CUDA cores are a warning for matrix work
  // (GEMM, conv, attention) only; memory-bound kernels (norms, element-wise, copies) belong there.
  function tcKey(r) {
    if (r.tc === "yes") return r.matrix ? "tensor" : "tensor_other";
    if (r.tc === "no") return r.matrix ? "matrix_cuda" : "cuda";
    return r.tc === "mixed" ? "mixed" : "unknown";
  }
  function tcBadge(r) {
    var k = tcKey(r);
    var text = {tensor: "tensor cores", tensor_other: "tensor cores", matrix_cuda: "CUDA cores", cuda: "CUDA cores",
                mixed: "mixed", unknown: "unknown"}[k];
    var title = {tensor: "matrix work on tensor cores", tensor_other: "on tensor cores",
                 matrix_cuda: "matrix work (GEMM, conv, attention) on CUDA cores: it could run on tensor cores",
                 cuda: "on CUDA cores, as work that does no matrix math (memory-bound: norms, element-wise, copies) should be",
                 mixed: "some launches on tensor cores, some not", unknown: "nothing told where it ran"}[k];
    return badge("tc-" + k, (k === "matrix_cuda" ? "⚠ " : "") + text, title);
  }
  function evidenceText(r) {
    var kinds = {metrics: "counters", name: "name rule", dtypes: "input types", none: "nothing"};
    return r.evidence.map(function (e) { return kinds[e] || e; }).join(", ") || "-";
  }
  function launchDetails(r, cpu) {
    var box = el("div", {"class": "launches"});
    var facts = el("p", {"class": "verdict"});
    facts.appendChild(el("b", null, "Verdict: "));
    facts.appendChild(document.createTextNode(r.precision + (cpu ? "" : ", " + ({yes: "on tensor cores", no: "on CUDA cores",
      mixed: "partly on tensor cores", unknown: "tensor-core use unknown"}[r.tc])) + " — evidence: " + evidenceText(r) + "."));
    box.appendChild(facts);
    r.details.forEach(function (d) { box.appendChild(el("p", {"class": "evidence-detail"}, d)); });
    box.appendChild(el("p", {"class": "kname full"}, r.name));
    if (r.op) box.appendChild(el("p", {"class": "note"}, "launched by " + r.op));
    var t = el("table", {"class": "plain"}), h = el("tr");
    var cols = cpu ? ["call", "self time", "thread", "range"] : ["launch", "duration", "grid", "block", "stream", "range", "tensor cores", "evidence"];
    cols.forEach(function (c) { h.appendChild(el("th", null, c)); });
    var thead = el("thead"); thead.appendChild(h); t.appendChild(thead);
    var tb = el("tbody");
    r.inside.forEach(function (l) {
      var tr = el("tr");
      var cells = cpu ? [l[0], fmtNs(l[1]), l[5], l[6]]
        : [l[0], fmtNs(l[1]), l[2], l[3], l[4], l[6], l[7] === null ? "-" : (l[7] ? "yes" : "no"), l[8]];
      cells.forEach(function (v, i) { tr.appendChild(el("td", {"class": i < 2 ? "num" : ""}, v === null || v === undefined ? "-" : v)); });
      tb.appendChild(tr);
    });
    t.appendChild(tb); box.appendChild(t);
    if (r.launches > r.inside.length) {
      box.appendChild(el("p", {"class": "note"}, "The first " + r.inside.length + " of " + r.launches.toLocaleString("en-US") +
        (cpu ? " calls" : " launches") + "; profkit kernels " + DATA.header.name + " --format json lists every one."));
    }
    return box;
  }
  // ---------------------------------------------------------------- the module tree
  // One row per module, its children's rows added under it when it is opened (a button with
  // aria-expanded: Enter or Space opens it too) and removed when it is closed; only opened
  // levels are ever drawn, whatever the model's size.
  function precisionBar(n) {
    var bar = el("div", {"class": "pbar"}), parts = [];
    Object.keys(n.precision_ns).forEach(function (p) {
      var t = n.precision_ns[p];
      if (!t || !n.time_ns) return;
      var pct = 100 * t / n.time_ns;
      parts.push(p + " " + pct.toFixed(1) + "%");
      var s = el("span", {"class": "pb-" + p, "data-precision": p});
      s.style.width = pct.toFixed(3) + "%";
      s.style.background = precColor(p);
      bar.appendChild(s);
    });
    bar.title = parts.join(" · ");
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", "time by precision: " + parts.join(", "));
    var box = el("div", {"class": "pmix"});
    box.appendChild(bar);
    box.appendChild(el("span", {"class": "plabel"}, parts.slice(0, 2).join(" · ") + (parts.length > 2 ? " …" : "")));
    return box;
  }
  function moduleTree() {
    var host = document.getElementById("module-tree"), M = DATA.modules;
    if (!host || !M.nodes.length) return;
    var total = M.time_ns || 1;
    var backward = M.nodes.some(function (n) { return n.phase_ns.backward; });  // no column for inference
    var table = el("table", {"class": "data tree", "aria-label": "module tree"});
    var head = el("tr");
    [["module", ""], ["GPU time", "num"], ["% of run", "num"], ["launches", "num"], ["precision", "mixcol"],
     ["tensor cores: of matrix work", "num"], ["forward", "num"]].concat(backward ? [["backward", "num"]] : []).forEach(function (c) {
      head.appendChild(el("th", {"class": c[1], scope: "col"}, c[0]));
    });
    var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    var tbody = el("tbody"); table.appendChild(tbody);
    var wrap = el("div", {"class": "table-wrap"}); wrap.appendChild(table); host.appendChild(wrap);
    function row(n, depth) {
      var tr = el("tr", {"class": "mnode", "data-path": n.path === null ? "" : n.path, "data-name": n.name,
                          "data-depth": depth, "data-time-ns": n.time_ns, "aria-level": depth + 1});
      var td = el("td", {"class": "mname"});
      td.style.paddingLeft = (8 + 18 * depth) + "px";
      var label = (n.path && n.name.charAt(0) !== "(" ? n.path : n.name);
      if (n.children.length) {
        var b = el("button", {type: "button", "class": "toggle", "aria-expanded": "false",
                              "aria-label": "open " + label + " (" + n.children.length + " below)"});
        b.appendChild(el("span", {"class": "caret", "aria-hidden": "true"}, "▸"));
        b.appendChild(el("span", {"class": "mlabel"}, n.name));
        b.addEventListener("click", function () { toggle(tr, n, depth, b); });
        td.appendChild(b);
      } else {
        td.appendChild(el("span", {"class": "leaf"}, n.name));
      }
      if (n.name.charAt(0) === "(") td.classList.add("entry");  // (model), (own operators), (optimizer), ...
      if (n.type && n.name !== "(own operators)") td.appendChild(el("span", {"class": "mtype"}, n.type));
      td.title = label;
      tr.appendChild(td);
      var tcTitle = n.matrix_ns ? "matrix work " + fmtNs(n.matrix_ns) + ", on tensor cores " + fmtNs(n.matrix_tc_ns)
                                : "no GEMM, conv or attention kernels";
      var fw = n.phase_ns.forward, bw = n.phase_ns.backward;
      [[fmtNs(n.time_ns), "num"], [fmtPct(100 * n.time_ns / total), "num"], [fmtNum(n.launches, 0), "num"],
       [precisionBar(n), "mixcol"], [n.tensor_core_pct === null ? "-" : fmtPct(n.tensor_core_pct), "num tc", tcTitle],
       [fw ? fmtNs(fw) : "-", "num"]].concat(backward ? [[bw ? fmtNs(bw) : "-", "num"]] : []).forEach(function (c) {
        var cell = el("td", {"class": c[1], title: c[2]});
        if (c[0] instanceof Node) cell.appendChild(c[0]); else cell.textContent = c[0];
        tr.appendChild(cell);
      });
      return tr;
    }
    function toggle(tr, n, depth, b) {
      var open = b.getAttribute("aria-expanded") === "true";
      if (open) {  // remove every row below it, down to the next row of its level or above
        var next = tr.nextSibling;
        while (next && Number(next.getAttribute("data-depth")) > depth) { var gone = next; next = next.nextSibling; tbody.removeChild(gone); }
      } else {
        var after = tr.nextSibling;
        n.children.forEach(function (c) { tbody.insertBefore(row(c, depth + 1), after); });
      }
      b.setAttribute("aria-expanded", open ? "false" : "true");
      b.setAttribute("aria-label", (open ? "open " : "close ") + b.getAttribute("aria-label").replace(/^(open|close) /, ""));
      tr.classList.toggle("open", !open);
    }
    M.nodes.forEach(function (n) {
      var tr = row(n, 0);
      tbody.appendChild(tr);
      // The model's first level shows at once; everything below opens level by level.
      if (n.path === "" && n.children.length) toggle(tr, n, 0, tr.querySelector("button.toggle"));
    });
  }

  function runPage() {
    moduleTree();
    var cpu = DATA.header.activity === "cpu_op";
    var rows = DATA.table.rows;
    var columns = [
      {key: "name", label: cpu ? "operator" : "kernel", cls: "kname", sortKey: function (r) { return r.short || r.name; },
       fmt: function (r) { var s = el("span", {title: r.name}, cutMiddle(r.short && !cpu ? r.short : r.name, NARROW ? 44 : 90)); return s; }},
      {key: "precision", label: "precision", fmt: function (r) { return badge("p-" + r.precision, r.precision); }},
    ];
    if (!cpu) columns.push({key: "tc", label: "tensor cores", sortKey: tcKey, fmt: tcBadge});
    columns.push(
      {key: "evidence", label: "evidence", low: true, sortKey: evidenceText, fmt: function (r) {
        return badge("ev-" + (r.evidence[0] || "none"), evidenceText(r), r.details.join("\n")); }},
      {key: "family", label: "family", low: true, fmt: function (r) { return r.family || "-"; }},
      {key: "launches", label: cpu ? "calls" : "launches", num: true, fmt: function (r) { return fmtNum(r.launches, 0); }},
      {key: "time_ns", label: cpu ? "self time" : "time", num: true, fmt: function (r) { return fmtNs(r.time_ns); }},
      {key: "pct", label: "% time", num: true, fmt: function (r) { return fmtPct(r.pct); }},
      {key: "mean_ns", label: "mean", num: true, low: true, fmt: function (r) { return fmtNs(r.mean_ns); }},
      {key: "max_ns", label: "max", num: true, low: true, fmt: function (r) { return fmtNs(r.max_ns); }}
    );
    var filters = [{key: "precision", label: "precision", values: function (r) { return [r.precision]; }},
                   {key: "family", label: "family", values: function (r) { return [r.family || "-"]; }}];
    if (!cpu) filters.splice(1, 0, {key: "tc", label: "tensor cores", values: function (r) { return [r.tc]; }});
    makeTable(document.getElementById("kernel-table"), {
      columns: columns, rows: rows, sort: {key: "time_ns", desc: true}, filters: filters,
      text: function (r) { return r.name + " " + (r.op || ""); }, details: function (r) { return launchDetails(r, cpu); },
      placeholder: cpu ? "filter operators by name" : "filter kernels by name"
    });
    if (!window.Chart) return;
    var top = rows.slice().sort(function (a, b) { return b.time_ns - a.time_ns; }).slice(0, 15);
    bar("chart-top", top.map(function (r) { return cutMiddle(r.short || r.name, NARROW ? 28 : 48); }), [{
      label: cpu ? "self time (ms)" : "GPU time (ms)", data: top.map(function (r) { return r.time_ns / 1e6; }),
      backgroundColor: top.map(function (r) { return precColor(r.precision); })}],
      {indexAxis: "y", full: top.map(function (r) { return r.name + " (" + r.precision + ", " + (cpu ? "" : r.tc + " tensor cores, ") + r.launches + " launches)"; }),
       xTitle: "ms"});
    var seen = [];
    top.forEach(function (r) { if (seen.indexOf(r.precision) < 0) seen.push(r.precision); });
    legend("chart-top", seen.map(function (p) { return [p, precColor(p)]; }));
    var s = DATA.summary, byP = s.time_by_precision_ns;
    doughnut("chart-precision", Object.keys(byP), Object.keys(byP).map(function (k) { return byP[k] / 1e6; }),
             Object.keys(byP).map(precColor));
    if (!cpu) {
      tensorChart(s);
    }
    if (DATA.ranges.length) {
      var rg = DATA.ranges;
      bar("chart-ranges", rg.map(function (r) { return cut(r.name || r.path, 40); }), [{
        label: cpu ? "self time (ms)" : "GPU time (ms)", data: rg.map(function (r) { return r.time_ns / 1e6; }), backgroundColor: C("neutral", "series")}],
        {indexAxis: "y", full: rg.map(function (r) { return r.path + " (" + r.kernels + (cpu ? " operators)" : " kernels)"); }), xTitle: "ms"});
    }
    if (DATA.timeline.bars.length) timeline(DATA.timeline);
  }

  // ---------------------------------------------------------------- charts
  var charts = [];
  // The run's time by tensor-core use, matrix work (GEMM, conv, attention) apart from the rest:
  // norms, element-wise and copies never use tensor cores, so they are not drawn as "off" them.
  function tensorChart(s) {
    var mw = s.matrix_work, tc = s.tensor_core_time_ns, un = s.unclassified_time_ns;
    var parts;
    if (!mw) {
      var off = Math.max(0, s.gpu_time_ns - tc - un);
      parts = [["tensor cores", tc, TC.tensor], ["CUDA cores", off, TC.cuda], ["unknown", un, TC.unknown]];
    } else {
      var mtc = mw.tensor_core_time_ns, mun = mw.undecided_time_ns, moff = Math.max(0, mw.time_ns - mtc - mun);
      var otc = Math.max(0, tc - mtc);
      var oun = Math.max(0, un - mun), other = Math.max(0, s.gpu_time_ns - mw.time_ns - otc - oun);
      parts = [["matrix work on tensor cores", mtc, TC.tensor], ["matrix work on CUDA cores", moff, TC.matrix_cuda],
               ["matrix work, undecided", mun, TC.unknown], ["other kernels on tensor cores", otc, TC.tensor_other],
               ["other kernels, undecided", oun, TC.unknown], ["other kernels (no matrix math)", other, TC.cuda]];
      parts = parts.filter(function (p) { return p[1] > 0; });
    }
    doughnut("chart-tensor", parts.map(function (p) { return p[0]; }), parts.map(function (p) { return p[1] / 1e6; }),
             parts.map(function (p) { return p[2]; }));
  }
  function bar(id, labels, datasets, opt) {
    var c = document.getElementById(id);
    if (!c) return;
    var box = c.parentNode;
    if (opt.indexAxis === "y") box.style.height = Math.max(160, 26 * labels.length + 60) + "px";
    charts.push(new Chart(c, {type: "bar", data: {labels: labels, datasets: datasets}, options: {
      indexAxis: opt.indexAxis || "x", maintainAspectRatio: false, animation: false, responsive: true,
      plugins: {legend: {display: datasets.length > 1}, tooltip: {callbacks: {title: function (items) {
        var i = items[0].dataIndex; return opt.full ? opt.full[i] : items[0].label; }}}},
      scales: opt.indexAxis === "y" ? {x: {title: {display: !!opt.xTitle, text: opt.xTitle}}, y: {ticks: {autoSkip: false}}}
                                    : {x: {stacked: !!opt.stacked},
                                       y: {stacked: !!opt.stacked, title: {display: !!opt.xTitle, text: opt.xTitle}}}}}));
  }
  function doughnut(id, labels, values, colors) {
    var c = document.getElementById(id);
    if (!c) return;
    charts.push(new Chart(c, {type: "doughnut", data: {labels: labels, datasets: [{data: values, backgroundColor: colors}]},
      options: {maintainAspectRatio: false, animation: false, plugins: {legend: {position: "right"}, tooltip: {callbacks: {
        label: function (it) { var sum = values.reduce(function (a, b) { return a + b; }, 0);
          return it.label + ": " + it.raw.toFixed(3) + " ms (" + (sum ? 100 * it.raw / sum : 0).toFixed(1) + "%)"; }}}}}}));
  }
  function timeline(tl) {
    var c = document.getElementById("chart-timeline");
    var lanes = tl.lanes;  // by device and stream number
    c.parentNode.style.height = Math.max(140, 48 * lanes.length + 70) + "px";
    // Matrix work (GEMM, conv, attention) off the tensor cores is red; other kernels (norms,
    // element-wise, copies), which never use them, are neutral.
    var groups = {"tensor cores": TC.tensor, "matrix work on CUDA cores": TC.matrix_cuda, "unknown": TC.unknown,
                  "memcpy / memset": C("neutral", "memory"), "other kernels (no matrix math)": TC.cuda};
    var datasets = Object.keys(groups).map(function (g) { return {label: g, data: [], backgroundColor: groups[g],
      borderColor: groups[g], borderWidth: 1, minBarLength: 2, barPercentage: 0.8, categoryPercentage: 1.0, grouped: false}; });
    tl.bars.forEach(function (b) {
      var g = b[4] !== "kernel" ? 3 : b[6] === true ? 0 : b[6] === false ? (b[7] ? 1 : 4) : 2;
      datasets[g].data.push({x: [b[1], b[2]], y: b[0], n: b[3], p: b[5]});
    });
    charts.push(new Chart(c, {type: "bar", data: {labels: lanes, datasets: datasets.filter(function (d) { return d.data.length; })},
      options: {indexAxis: "y", maintainAspectRatio: false, animation: false, parsing: {xAxisKey: "x", yAxisKey: "y"},
        plugins: {tooltip: {callbacks: {title: function (items) { return items[0].raw.n; },
          label: function (it) { var r = it.raw.x; return it.dataset.label + ", " + (it.raw.p || "") + ": " + (r[1] - r[0]).toFixed(2) +
            " us, at " + r[0].toFixed(1) + " us"; }}}},
        scales: {x: {type: "linear", min: 0, max: tl.span_us, title: {display: true, text: "us from the iteration's first GPU operation"}},
                 y: {type: "category", labels: lanes}}}}));
  }

  // ---------------------------------------------------------------- the side-by-side page
  // A changed row's time in the change's colours: faster (less time in B) or slower.
  function changeKey(r) { return r.status === "same" || !r.delta_time_ns ? null : r.delta_time_ns < 0 ? "faster" : "slower"; }
  function changed(r, text) {
    var k = changeKey(r);
    return k ? el("span", {"class": "d-" + k, title: k + " in B"}, text) : text;
  }
  function vsPage() {
    var d = DATA.diff, a = DATA.sides[0].header.name, b = DATA.sides[1].header.name;
    var cpu = DATA.sides[0].header.activity === "cpu_op";
    var columns = [
      {key: "name", label: d.match === "exact" ? (cpu ? "operator" : "kernel") : d.match === "family" ? "work" : "operator",
       cls: "kname",
       sortKey: function (r) { return d.labels[r.__i]; },
       fmt: function (r) { return el("span", {title: r.name}, cutMiddle(d.labels[r.__i], NARROW ? 36 : 90)); }},
      {key: "status", label: "status", fmt: function (r) { return badge("st-" + r.status, r.status); }},
      {key: "kind", label: "kind", low: true},
      {key: "calls_a", label: "calls A", num: true, low: true, fmt: function (r) { return fmtNum(r.calls_a, 2); }},
      {key: "calls_b", label: "calls B", num: true, low: true, fmt: function (r) { return fmtNum(r.calls_b, 2); }},
      {key: "time_a_ns", label: "time A", num: true, low: true, fmt: function (r) { return fmtNs(r.time_a_ns); }},
      {key: "time_b_ns", label: "time B", num: true, fmt: function (r) { return fmtNs(r.time_b_ns); }},
      {key: "delta_time_ns", label: "Δ time", num: true, fmt: function (r) { return changed(r, fmtNs(r.delta_time_ns)); }},
      {key: "delta_pct", label: "Δ %", num: true, fmt: function (r) {
        return changed(r, r.delta_pct === null ? "new" : (r.delta_pct > 0 ? "+" : "") + r.delta_pct.toFixed(1) + "%"); }},
      {key: "precision_a", label: "precision A → B", low: true, sortKey: function (r) { return (r.precision_a || "") + (r.precision_b || ""); },
       fmt: function (r) { return (r.precision_a || "-") + " → " + (r.precision_b || "-"); }},
    ];
    if (!cpu) columns.push(
      {key: "tensor_core_pct_a", label: "tensor cores A → B", sortKey: function (r) { return r.tensor_core_pct_b; },
       fmt: function (r) { return fmtPct(r.tensor_core_pct_a) + " → " + fmtPct(r.tensor_core_pct_b); }});
    makeTable(document.getElementById("kernel-table"), {
      columns: columns, rows: d.rows, sort: null,
      filters: [{key: "status", label: "status", values: function (r) { return [r.status]; }},
                {key: "kind", label: "kind", values: function (r) { return [r.kind]; }}],
      text: function (r) { return r.name + " " + r.variants_a.join(" ") + " " + r.variants_b.join(" "); },
      details: function (r) {
        var box = el("div", {"class": "launches"});
        [["A (" + a + ")", r.variants_a], ["B (" + b + ")", r.variants_b]].forEach(function (side) {
          box.appendChild(el("p", null, side[0] + ": " + side[1].length + " kernel name" + (side[1].length === 1 ? "" : "s")));
          var ul = el("ul", {"class": "variants"});
          side[1].forEach(function (v) { ul.appendChild(el("li", {"class": "kname full"}, v)); });
          box.appendChild(ul);
        });
        return box;
      },
      placeholder: "filter rows by name"
    });
    if (!window.Chart) return;
    var t = d.totals, pa = t.time_by_precision_a_ns, pb = t.time_by_precision_b_ns, keys = [];
    Object.keys(pa).concat(Object.keys(pb)).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
    bar("chart-vs-precision", ["A: " + cut(a, 30), "B: " + cut(b, 30)], keys.map(function (k) {
      return {label: k, data: [(pa[k] || 0) / 1e6, (pb[k] || 0) / 1e6], backgroundColor: precColor(k), stack: "t"}; }),
      {xTitle: "ms", stacked: true});
    var big = d.rows.slice().sort(function (x, y) { return Math.abs(y.delta_time_ns) - Math.abs(x.delta_time_ns); }).slice(0, 15);
    // A row the diff calls the same (its time moved less than the threshold) is neither.
    var colour = {faster: C("change", "faster"), slower: C("change", "slower"), same: C("neutral", "quiet")};
    bar("chart-vs-delta", big.map(function (r) { return cutMiddle(d.labels[r.__i], NARROW ? 28 : 34); }), [{label: "B − A (ms)",
      data: big.map(function (r) { return r.delta_time_ns / 1e6; }),
      backgroundColor: big.map(function (r) { return colour[changeKey(r) || "same"]; })}],
      {indexAxis: "y", full: big.map(function (r) { return r.name + " (" + r.status + ")"; }), xTitle: "ms"});
    var keys = ["faster", "slower", "same"].filter(function (k) { return big.some(function (r) { return (changeKey(r) || "same") === k; }); });
    legend("chart-vs-delta", keys.map(function (k) {
      return [{faster: "faster in B", slower: "slower in B", same: "within " + d.threshold_pct + "% (the same)"}[k], colour[k]]; }));
  }

  // ---------------------------------------------------------------- the index page
  function indexPage() {
    makeTable(document.getElementById("kernel-table"), {
      columns: [
        {key: "name", label: "run", cls: "runname", fmt: function (r) {
          if (!r.report) return r.name;
          var a = el("a", {href: encodeURIComponent(r.report)}, r.name); return a; }},
        {key: "workload", label: "workload"}, {key: "precision", label: "precision"}, {key: "mode", label: "mode", low: true},
        {key: "tool", label: "tool", low: true}, {key: "gpu_name", label: "GPU", low: true, fmt: function (r) { return r.activity === "cpu_op" ? "CPU" : r.gpu_name; }},
        {key: "kernels", label: "launches (CPU: calls)", num: true, low: true, fmt: function (r) { return fmtNum(r.kernels, 0); }},
        {key: "time_ns", label: "GPU time (CPU: self time)", num: true, fmt: function (r) { return r.time; }},
        {key: "matrix_tensor_core_pct", label: "tensor cores: of matrix work", num: true,
         title: "the share of GEMM, conv and attention kernels' time on tensor cores (each report's headline)",
         sortKey: function (r) { return r.matrix_tensor_core_pct === null ? -1 : r.matrix_tensor_core_pct; },
         fmt: function (r) { return r.matrix_text; }},
        {key: "tensor_core_time_pct", label: "of all GPU time", num: true, low: true, fmt: function (r) { return fmtPct(r.tensor_core_time_pct); }},
        {key: "date", label: "date", low: true, fmt: function (r) { return r.date ? String(r.date).slice(0, 16).replace("T", " ") : "-"; }}
      ],
      rows: DATA.runs, sort: null,
      filters: [{key: "workload", label: "workload", values: function (r) { return [r.workload || "-"]; }},
                {key: "tool", label: "tool", values: function (r) { return [r.tool || "-"]; }}],
      text: function (r) { return [r.name, r.workload, r.precision, r.mode, r.tool, r.gpu_name].join(" "); },
      placeholder: "filter runs"
    });
  }

  try {
    if (DATA.page === "run") runPage(); else if (DATA.page === "vs") vsPage(); else indexPage();
    document.body.setAttribute("data-ready", "1");
  } catch (e) {
    document.body.setAttribute("data-error", String(e));
    throw e;
  }
})();
