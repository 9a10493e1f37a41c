// The web UI's pictures (docs/ui.md): a pipeline's time series drawn by uPlot (vendored in
// uplot/, MIT), and timelines and bars drawn as plain elements. Loaded before app.js, which
// calls the functions of `StratusCharts`. The page is rebuilt at every refresh: a chart is
// kept across refreshes (its element moves into the new page, its data is replaced), so it
// neither flickers nor loses its size. Every picture carries its figures as data-*
// attributes (data-points, data-gap-secs, ...), and `StratusCharts.data(id)` returns what a
// chart draws: what the browser tests read.
"use strict";

const StratusCharts = (() => {
  const CHART_WIDTH = 420;
  const CHART_HEIGHT = 190;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];
  const TERM_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]; // no red: gaps are
  const OUTCOME_COLORS = {
    FINISHED: "#2ca02c", FAILED: "#d62728", STOPPED: "#7f7f7f", FENCED: "#9467bd",
    MOVED: "#1f77b4", UPDATED: "#17becf",
  };
  const MAX_SLOT_CELLS = 128; // a supervisor with more shows its counts only past them
  const charts = new Map(); // chart id -> { node, plot, key }

  function make(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ---------------------------------------------------------------- time series (uPlot)

  // One chart: its element, kept across refreshes while it shows the same pipeline.
  function lineChart(id, key, title, series, data) {
    let chart = charts.get(id);
    if (!chart || chart.key !== key) {
      if (chart) chart.plot.destroy();
      const node = make("figure", "chart");
      node.id = id;
      node.append(make("figcaption", null, title));
      const opts = {
        width: CHART_WIDTH,
        height: CHART_HEIGHT,
        series: [{}, ...series.map((s, i) => ({ stroke: COLORS[i], width: 1.5, spanGaps: false, ...s }))],
        axes: [{}, { size: 60 }],
        legend: { live: false },
        tzDate: (secs) => uPlot.tzDate(new Date(secs * 1000), "Etc/UTC"), // the page's times are UTC
      };
      chart = { node, key, plot: new uPlot(opts, data, node) };
      charts.set(id, chart);
    } else {
      chart.plot.setData(data);
    }
    chart.node.dataset.points = String(data[0].length);
    return chart.node;
  }

  function column(points, field) {
    return points.map((p) => (p[field] === null || p[field] === undefined ? null : p[field]));
  }

  // The three charts of a pipeline's page, from GET /api/v1/pipelines/NAME/series.
  function pipelineCharts(name, series) {
    const points = series ? series.points : [];
    const at = points.map((p) => p.at);
    const box = make("div", "charts");
    box.id = "series";
    box.dataset.points = String(points.length);
    if (!points.length) {
      box.append(make("p", "none", "no points yet: a running worker's heartbeats are charted every step"));
      return box;
    }
    box.append(
      lineChart("chart-rates", name, "rows per second: input and processed",
        [{ label: "input rows/s" }, { label: "processed rows/s" }],
        [at, column(points, "input_rows_per_second"), column(points, "processed_rows_per_second")]),
      lineChart("chart-batch", name, "batch duration against the trigger interval (s)",
        [{ label: "batch s" }, { label: "trigger s", dash: [6, 4] }],
        [at, column(points, "batch_duration_secs"), column(points, "trigger_interval_secs")]),
      lineChart("chart-watermark", name, "watermark lag (s)",
        [{ label: "watermark lag s" }],
        [at, column(points, "watermark_lag_secs")]),
    );
    return box;
  }

  // What a chart draws, [x, y1, y2...], or null: for the browser tests.
  function data(id) {
    const chart = charts.get(id);
    return chart ? chart.plot.data : null;
  }

  // ---------------------------------------------------------------- timelines (elements)

  function span(from, to, start, width) {
    return { left: (100 * (from - start)) / width, width: Math.max(0.3, (100 * (to - from)) / width) };
  }

  function place(node, where) {
    node.style.left = `${where.left}%`;
    node.style.width = `${where.width}%`;
    return node;
  }

  function axis(start, end) {
    const row = make("div", "axis");
    row.append(make("span", null, new Date(start * 1000).toISOString().slice(0, 19) + "Z"));
    row.append(make("span", null, new Date(end * 1000).toISOString().slice(0, 19) + "Z"));
    return row;
  }

  // The leader terms, oldest left: a bar per term (a colour per nimbus), and between two
  // terms the leaderless gap, labelled with the newer term's failover_secs.
  function termsTimeline(terms, now) {
    const box = make("div", "timeline");
    box.id = "terms-timeline";
    if (!terms.length) return box;
    const ordered = [...terms].reverse();
    const start = ordered[0].started_at;
    const end = Math.max(now, ...ordered.map((t) => t.ended_at || now));
    const width = Math.max(1, end - start);
    const nimbuses = [...new Set(ordered.map((t) => t.nimbus))];
    const track = make("div", "track");
    ordered.forEach((term, i) => {
      const bar = place(make("div", "term"), span(term.started_at, term.ended_at || end, start, width));
      bar.style.background = TERM_COLORS[nimbuses.indexOf(term.nimbus) % TERM_COLORS.length];
      bar.dataset.epoch = String(term.epoch);
      bar.title = `epoch ${term.epoch}: ${term.nimbus}` + (term.ended_by ? `, ended by its ${term.ended_by}` : "");
      track.append(bar);
      const previous = ordered[i - 1];
      if (previous && term.failover_secs !== null) {
        const from = previous.ended_at === null ? term.started_at - term.failover_secs : previous.ended_at;
        const gap = place(make("div", "gap"), span(Math.min(from, term.started_at), term.started_at, start, width));
        gap.dataset.gapSecs = String(term.failover_secs);
        gap.dataset.epoch = String(term.epoch);
        gap.title = `no leader for ${term.failover_secs.toFixed(3)} s before epoch ${term.epoch}`;
        track.append(gap);
      }
    });
    const legend = make("p", "legend");
    nimbuses.forEach((nimbus, i) => {
      const key = make("span", "key", nimbus);
      key.style.borderColor = TERM_COLORS[i % TERM_COLORS.length];
      legend.append(key);
    });
    const gaps = ordered.filter((t, i) => i > 0 && t.failover_secs !== null);
    gaps.forEach((t) => legend.append(make("span", "gap-label", `gap before epoch ${t.epoch}: ${t.failover_secs.toFixed(2)} s`)));
    box.append(track, axis(start, end), legend);
    return box;
  }

  // A pipeline's runs (GET /api/v1/pipelines/NAME/runs), oldest left, coloured by outcome.
  function runsTimeline(runs, now) {
    const box = make("div", "timeline");
    box.id = "runs-timeline";
    box.dataset.runs = String(runs.length);
    if (!runs.length) {
      box.append(make("p", "none", "no runs recorded"));
      return box;
    }
    const ordered = [...runs].reverse();
    const start = ordered[0].started;
    const end = Math.max(now, ...ordered.map((r) => r.ended || now));
    const width = Math.max(1, end - start);
    const track = make("div", "track");
    for (const run of ordered) {
      const bar = place(make("div", "run"), span(run.started, run.ended || end, start, width));
      bar.style.background = OUTCOME_COLORS[run.outcome] || "#bbb";
      bar.dataset.run = String(run.run);
      bar.title = `run ${run.run} on ${run.supervisor}: ${run.outcome || "running"}`;
      track.append(bar);
    }
    box.append(track, axis(start, end));
    return box;
  }

  // Used and free slots of each supervisor: a cell per slot.
  function slotBars(supervisors) {
    const box = make("div", "slots");
    box.id = "slots";
    for (const s of supervisors) {
      const row = make("div", "slot-row");
      row.dataset.supervisor = s.id;
      row.dataset.used = String(s.used);
      row.dataset.slots = String(s.slots);
      row.append(make("span", "slot-name", s.id));
      const cells = make("span", "slot-cells");
      for (let i = 0; i < Math.min(s.slots, MAX_SLOT_CELLS); i++) cells.append(make("span", i < s.used ? "slot used" : "slot free"));
      row.append(cells, make("span", "slot-count", `${s.used} used, ${Math.max(0, s.slots - s.used)} free`));
      box.append(row);
    }
    return box;
  }

  return { pipelineCharts, termsTimeline, runsTimeline, slotBars, data };
})();
