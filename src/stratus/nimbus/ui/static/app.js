// The stratus web UI: one page of plain JavaScript over the nimbus's JSON API (docs/ui.md).
// No build step; the one library, uPlot, is vendored (charts.js draws with it): every asset
// comes from the nimbus that serves the page.
// Views: "#/" the cluster, "#/pipelines/NAME" one pipeline. The page polls the API every
// POLL_MS (nimbus.ui.refresh.secs) while it is visible, one round at a time. A bearer token
// pasted by the user is kept in sessionStorage (this tab only) and sent as Authorization; a
// client certificate needs nothing. Leader-only actions go to the leader, following a 421 not_leader answer.
"use strict";

// nimbus.ui.refresh.secs, which the page's head carries
const REFRESH = document.querySelector("meta[name=stratus-refresh-secs]");
const POLL_MS = Math.max(500, 1000 * (REFRESH ? Number(REFRESH.content) : 2) || 2000);
const LOG_TAIL_LINES = 200;
const TOKEN_KEY = "stratus.token";
const ACTION_ROLES = { read: 0, submit: 1, admin: 2 };

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  role: null, // "read" | "submit" | "admin" once known
  authRequired: false,
  self: null, // /api/v1/nimbus
  cluster: null, // /api/v1/cluster
  supervisors: null, // /api/v1/supervisors
  workers: null, // /api/v1/workers
  terms: null, // /api/v1/leader/terms, or "unavailable"
  pipeline: null, // /api/v1/pipelines/NAME on a pipeline's page
  placement: null, // /api/v1/pipelines/NAME/workers
  history: null, // /api/v1/pipelines/NAME/history
  series: null, // /api/v1/pipelines/NAME/series
  runs: null, // /api/v1/pipelines/NAME/runs, or "none" where this nimbus has no such route
  error: null, // the last refresh's error, shown in the banner
  notice: null, // the last action's outcome
  polling: false,
  rounds: 0, // refresh rounds done: the page's data-round
};

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows, attrs) {
  // headers null: a table of facts, each row its own header cell
  return el(
    "table",
    attrs,
    headers ? el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))) : null,
    el(
      "tbody",
      {},
      rows.length
        ? rows
        : el("tr", {}, el("td", { colspan: headers ? headers.length : 1, class: "none" }, "none")),
    ),
  );
}

function iso(secs) {
  // ISO 8601 UTC to the second, as the CLI prints: 2026-11-25T00:34:01Z
  if (secs === null || secs === undefined) return "";
  return new Date(secs * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function duration(secs) {
  if (secs === null || secs === undefined) return "";
  const s = Math.floor(secs);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min`;
  if (s < 172800) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function leaderUrl(address) {
  return `${location.protocol}//${address}`;
}

function may(role) {
  return state.role !== null && ACTION_ROLES[state.role] >= ACTION_ROLES[role];
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
    this.leader = body && body.leader;
  }
}

async function call(path, options, base) {
  const headers = Object.assign({}, (options && options.headers) || {});
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const response = await fetch((base || "") + path, {
    ...(options || {}),
    headers,
    credentials: base ? "include" : "same-origin",
  });
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// A leader-only call: to the leader this nimbus knows, then to the one a 421 names.
async function leaderCall(path, makeOptions) {
  const self = state.self;
  let base = self && !self.is_leader && self.leader ? leaderUrl(self.leader) : "";
  for (let hop = 0; hop < 3; hop++) {
    try {
      return await call(path, makeOptions(), base);
    } catch (error) {
      if (error instanceof ApiError && error.code === "not_leader" && error.leader) {
        base = leaderUrl(error.leader);
        continue;
      }
      throw error;
    }
  }
  throw new Error("the leader moved three times during the call; retry");
}

function jsonPost(body) {
  return () => ({
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

function route() {
  const match = /^#\/pipelines\/([^/]+)$/.exec(location.hash);
  return match ? { view: "pipeline", name: decodeURIComponent(match[1]) } : { view: "cluster" };
}

// ------------------------------------------------------------------ refresh

async function refresh() {
  if (state.polling) return; // one round at a time
  state.polling = true;
  const where = route();
  try {
    if (state.role === null) {
      const caller = await call("/api/v1/whoami");
      state.role = caller.role;
      state.authRequired = caller.auth_required;
    }
    const reads = [
      call("/api/v1/nimbus"),
      call("/api/v1/cluster"),
      call("/api/v1/supervisors"),
      call("/api/v1/workers"),
      call("/api/v1/leader/terms").catch((error) => {
        if (error instanceof ApiError && error.status === 404) return "unavailable";
        throw error;
      }),
    ];
    if (where.view === "pipeline") {
      const name = encodeURIComponent(where.name);
      const gone = (error) => {
        if (error instanceof ApiError && error.status === 404) return "gone";
        throw error;
      };
      reads.push(
        call(`/api/v1/pipelines/${name}`).catch(gone),
        call(`/api/v1/pipelines/${name}/workers`).catch(gone),
        call(`/api/v1/pipelines/${name}/history`).catch(gone),
        call(`/api/v1/pipelines/${name}/series`).catch(gone),
        call(`/api/v1/pipelines/${name}/runs`).catch((error) => {
          if (error instanceof ApiError && error.status === 404) return "none"; // no route, or gone
          throw error;
        }),
      );
    }
    const [self, cluster, supervisors, workers, terms, pipeline, placement, history, series, runs] =
      await Promise.all(reads);
    Object.assign(state, { self, cluster, supervisors, workers, terms, error: null });
    state.pipeline = pipeline || null;
    state.placement = placement || null;
    state.history = history || null;
    state.series = series && series !== "gone" ? series : null;
    state.runs = runs || null;
  } catch (error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
      state.role = null;
    }
    state.error = error;
  } finally {
    state.polling = false;
    state.rounds += 1;
  }
  render();
}

// ------------------------------------------------------------------ views

function header() {
  const self = state.self;
  const leader = state.cluster ? state.cluster.leader : null;
  const tokenBox = el(
    "form",
    {
      id: "token-form",
      hidden: state.role !== null && !state.authRequired, // an open cluster needs no token
      onsubmit: (event) => {
        settle(event);
        const value = event.target.elements.token.value.trim();
        state.token = value;
        if (value) sessionStorage.setItem(TOKEN_KEY, value);
        else sessionStorage.removeItem(TOKEN_KEY);
        state.role = null;
        refresh();
      },
    },
    el("input", {
      name: "token",
      type: "password",
      placeholder: "bearer token",
      autocomplete: "off",
      value: state.token,
    }),
    el("button", { type: "submit" }, state.token ? "change token" : "use token"),
  );
  const who = [];
  if (leader) {
    who.push("Leader: ", el("b", { id: "leader" }, leader.address || "none elected"));
    who.push(`, epoch ${leader.epoch === null ? "-" : leader.epoch}`);
  }
  if (self && !self.is_leader) {
    who.push(" · this nimbus ", el("b", {}, self.address), " is a standby");
    if (self.leader) {
      who.push(" · ", el("a", { id: "leader-link", href: leaderUrl(self.leader) + "/" }, "open the leader's page"));
    }
  } else if (self) {
    who.push(" · this nimbus ", el("b", {}, self.address), " leads");
  }
  return el(
    "header",
    {},
    el("h1", {}, el("a", { href: "#/" }, "stratus")),
    el("p", { id: "who" }, who),
    tokenBox,
    state.role ? el("span", { id: "role" }, `role: ${state.role}`) : null,
  );
}

function banners() {
  const out = [];
  const insecure = state.cluster
    ? state.cluster.nimbuses.filter((n) => n.insecure).map((n) => `${n.host}:${n.port}`)
    : [];
  if (insecure.length) {
    out.push(
      el(
        "p",
        { class: "insecure" },
        `INSECURE: ${insecure.join(", ")} serve an unauthenticated API (nimbus.auth.insecure): ` +
          "anyone who reaches them can run code on every supervisor",
      ),
    );
  }
  if (state.error) {
    const needsToken = state.error.status === 401;
    out.push(
      el(
        "p",
        { class: "error", id: "refresh-error" },
        needsToken
          ? "This nimbus requires authentication: paste a token above (or use a client certificate)."
          : `Cannot refresh: ${state.error.message}; retrying every ${POLL_MS / 1000} s.`,
      ),
    );
  }
  if (state.notice) {
    out.push(el("p", { class: state.notice.ok ? "notice" : "error", id: "notice" }, state.notice.text));
  }
  return out;
}

function workerOf(name) {
  if (!state.workers) return null;
  const placed = state.workers.pipelines.find((p) => p.pipeline === name);
  if (!placed) return null;
  // the worker of the assignment; without one, the last worker heard from
  const where = placed.assignment ? placed.assignment.supervisor : null;
  const latest = placed.workers.reduce((a, b) => (a === null || b.time > a.time ? b : a), null);
  const beat = where ? placed.workers.find((w) => w.supervisor === where) || null : latest;
  return { assignment: placed.assignment, beat };
}

function rate(beat) {
  if (!beat || !beat.queries.length) return "";
  const total = beat.queries.reduce((sum, q) => sum + q.processed_rows_per_second, 0);
  return total.toFixed(1);
}

function batch(beat) {
  if (!beat) return "";
  if (beat.queries.length) return String(Math.max(...beat.queries.map((q) => q.batch_id)));
  return beat.runs ? `${beat.runs} runs` : "";
}

function sparkLink(beat) {
  return beat && beat.spark_ui ? el("a", { href: beat.spark_ui, target: "_blank", rel: "noopener" }, "Spark UI") : "";
}

function clusterView() {
  const cluster = state.cluster;
  if (!cluster) return [el("p", {}, "loading…")];
  const self = state.self;
  const nimbusRows = cluster.nimbuses.map((n) => {
    const address = `${n.host}:${n.port}`;
    const isSelf = self && self.address === address;
    const zk = isSelf ? self.zookeeper : "session live";
    return el(
      "tr",
      { class: n.is_leader ? "leader" : null, "data-nimbus": address },
      el("td", {}, address + (isSelf ? " (this nimbus)" : "")),
      el("td", { class: "role" }, n.is_leader ? "leader" : "standby"),
      el("td", {}, n.is_leader && cluster.leader.epoch !== null ? cluster.leader.epoch : ""),
      el("td", {}, duration(n.uptime_secs)),
      el("td", {}, zk),
      el("td", {}, n.version),
    );
  });
  const supervisorRows = (state.supervisors ? state.supervisors.supervisors : []).map((s) =>
    el(
      "tr",
      {},
      el("td", {}, s.id),
      el("td", {}, s.host),
      el("td", {}, `${s.used} / ${s.slots}`),
      el("td", {}, s.heartbeat_age_secs === null ? "none" : `${s.heartbeat_age_secs.toFixed(1)} s`),
      el("td", {}, s.running.join(", ")),
      el("td", { class: "standby" }, standbyCount(s.warm)),
      el("td", { class: "scheduling" }, s.draining ? "draining" : s.cordoned ? "cordoned" : ""),
      el("td", {}, s.stopping ? "stopping" : ""),
    ),
  );
  const pipelineRows = cluster.pipelines.map((p) => {
    const placed = workerOf(p.name);
    const beat = placed ? placed.beat : null;
    const error = (beat && (beat.error || (beat.last_crash && beat.last_crash.error))) || p.reason || "";
    return el(
      "tr",
      { "data-pipeline": p.name },
      el("td", {}, el("a", { href: `#/pipelines/${encodeURIComponent(p.name)}` }, p.name)),
      el("td", { class: `status ${p.status}` }, p.status),
      el("td", {}, placed && placed.assignment ? placed.assignment.supervisor : ""),
      el("td", {}, beat ? beat.state : ""),
      el("td", {}, beat ? beat.restarts : ""),
      el("td", {}, batch(beat)),
      el("td", {}, rate(beat)),
      el("td", { class: "clip", title: error }, error),
      el("td", {}, sparkLink(beat)),
      el("td", {}, iso(p.submitted)),
    );
  });
  return [
    el("h2", {}, "Nimbuses"),
    table(["nimbus", "role", "epoch", "uptime", "ZooKeeper", "version"], nimbusRows, { id: "nimbuses" }),
    el("h2", {}, "Supervisors"),
    table(["id", "host", "slots used", "heartbeat age", "runs", "standby workers", "scheduling", ""], supervisorRows, { id: "supervisors" }),
    el("h3", {}, "Slots"),
    StratusCharts.slotBars(state.supervisors ? state.supervisors.supervisors : []),
    el("h2", {}, "Pipelines"),
    table(
      ["name", "status", "placement", "worker", "restarts", "batch", "rows/s", "last error", "Spark", "submitted"],
      pipelineRows,
      { id: "pipelines" },
    ),
    may("submit") ? submitForm() : null,
    el("h2", {}, "Leader terms"),
    termsView(),
    el("p", { class: "links" }, el("a", { href: "/api/v1/docs" }, "API"), " · ", el("a", { href: "/metrics" }, "metrics")),
  ];
}

// A supervisor's standby workers and their memory, from its registration; "" for none.
function standbyCount(warm) {
  if (!warm || !warm.standby_workers) return "";
  return `${warm.standby_workers} (${warm.standby_mb} MiB)`;
}

// A pipeline's standby worker: where, its state, since when and its memory, or why none;
// then the newest refusals. Nothing for a pipeline that wants none.
function standbyView(standby) {
  if (!standby) return null;
  const refusalRows = standby.refusals.map((r) =>
    el("tr", {}, el("td", {}, iso(r.at)), el("td", {}, r.supervisor), el("td", { class: "clip", title: r.reason }, r.reason)),
  );
  const refusals = refusalRows.length ? table(["time", "supervisor", "reason"], refusalRows, { id: "standby-refusals" }) : null;
  if (standby.supervisor === null) {
    return [el("h3", {}, "Standby worker"), el("p", { id: "standby-worker", class: "none" }, `none: ${standby.unplaced_because || "not placed"}`), refusals];
  }
  const row = el(
    "tr",
    {},
    el("td", {}, standby.supervisor),
    el("td", {}, standby.host || ""),
    el("td", { class: "state" }, standby.state || "not reported yet"),
    el("td", {}, iso(standby.since)),
    el("td", {}, standby.rss_mb === null ? "" : `${standby.rss_mb} MiB`),
    el("td", {}, standby.pid === null ? "" : standby.pid),
    el("td", {}, standby.generation === null ? "" : standby.generation),
    el("td", { class: "clip", title: standby.error || "" }, standby.error || ""),
  );
  return [
    el("h3", {}, "Standby worker"),
    table(["supervisor", "host", "state", "since", "memory", "pid", "generation", "error"], [row], { id: "standby-worker" }),
    refusals,
  ];
}

function termsView() {
  if (state.terms === null) return el("p", {}, "loading…");
  if (state.terms === "unavailable") return el("p", { id: "terms", class: "none" }, "not available on this nimbus");
  const timeline = StratusCharts.termsTimeline(state.terms.terms, Date.now() / 1000);
  const rows = state.terms.terms.map((t) =>
    el(
      "tr",
      {},
      el("td", {}, t.epoch),
      el("td", {}, t.nimbus),
      el("td", {}, iso(t.started_at)),
      el("td", {}, t.ended_at === null ? "leading" : iso(t.ended_at)),
      el("td", {}, t.failover_secs === null ? "" : `${t.failover_secs.toFixed(3)} s`),
    ),
  );
  return [timeline, table(["epoch", "nimbus", "started", "ended", "leaderless gap"], rows, { id: "terms" })];
}

function submitForm() {
  return el(
    "form",
    { id: "submit-form", class: "action", onsubmit: onSubmitPackage },
    el("h3", {}, "Submit a pipeline"),
    el("label", {}, "package (zip) ", el("input", { type: "file", name: "package", required: true, accept: ".zip" })),
    el("label", {}, "name ", el("input", { name: "name", placeholder: "the manifest's" })),
    el("label", {}, "conf (JSON) ", el("input", { name: "conf", placeholder: "{}" })),
    el("button", { type: "submit" }, "submit"),
  );
}

function pipelineView(name) {
  const record = state.pipeline;
  if (record === "gone") {
    return [el("h2", {}, `Pipeline ${name}`), el("p", { id: "gone", class: "none" }, "no such pipeline (a killed one is removed after its wait)")];
  }
  if (!record || record.name !== name) {
    return [el("p", {}, state.error ? "" : "loading…")];
  }
  const placement = state.placement && state.placement !== "gone" ? state.placement : { assignment: null, workers: [] };
  const a = placement.assignment;
  const facts = [
    ["status", record.status],
    ["owner", record.owner || ""],
    ["version", record.version],
    ["package", record.digest.slice(0, 12)],
    ["submitted", iso(record.submitted)],
    ["updated", iso(record.updated)],
    ["epoch of the record", record.epoch],
    ["rebalances", record.rebalances],
    ["replication", `${record.replication} / ${record.replication_required}`],
    ["reason", record.reason || ""],
    ["update waiting", record.update ? `${record.update.digest.slice(0, 12)} (${record.update.replication}/${record.update.replication_required})` : ""],
  ];
  const workerRows = placement.workers.map((w) =>
    el(
      "tr",
      {},
      el("td", {}, w.supervisor),
      el("td", { class: "state" }, w.state),
      el("td", {}, w.pid === null ? "" : w.pid),
      el("td", {}, w.epoch),
      el("td", {}, w.restarts),
      el("td", {}, batch(w)),
      el("td", {}, rate(w)),
      el("td", {}, sparkLink(w)),
      el("td", {}, iso(w.time)),
      el("td", { class: "clip", title: w.error || "" }, w.error || ""),
    ),
  );
  const crashRows = placement.workers
    .filter((w) => w.last_crash)
    .map((w) =>
      el(
        "tr",
        {},
        el("td", {}, iso(w.last_crash.time)),
        el("td", {}, w.supervisor),
        el("td", {}, w.last_crash.signal || (w.last_crash.exit_code === null ? "not started" : `exit code ${w.last_crash.exit_code}`)),
        el("td", {}, w.restarts),
        el("td", {}, el("pre", {}, w.last_crash.error)),
      ),
    );
  const changes = state.history && state.history !== "gone" && state.history.pipeline === name ? state.history.changes : [];
  const historyRows = changes.map((c) =>
    el(
      "tr",
      {},
      el("td", {}, iso(c.at)),
      el("td", {}, c.epoch),
      el("td", { class: "reason" }, c.reason),
      el("td", {}, c.supervisor === null ? "none" : c.supervisor),
      el("td", {}, c.previous === null ? "none" : c.previous),
      el("td", {}, c.generation),
      el("td", {}, c.digest.slice(0, 12)),
    ),
  );
  const confRows = Object.entries(record.conf).map(([key, value]) =>
    el("tr", {}, el("td", {}, key), el("td", {}, typeof value === "string" ? value : JSON.stringify(value))),
  );
  return [
    el("h2", {}, `Pipeline ${name}`),
    table(null, facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { "data-fact": k }, v))), { id: "record" }),
    may("submit") ? actions(record) : null,
    el("h3", {}, "Last hour"),
    StratusCharts.pipelineCharts(name, state.series && state.series.pipeline === name ? state.series : null),
    runsView(name),
    el("h3", {}, "Assignment"),
    a
      ? table(
          ["supervisor", "epoch", "generation", "assigned"],
          [el("tr", {}, el("td", {}, a.supervisor), el("td", {}, a.epoch), el("td", {}, a.generation), el("td", {}, iso(a.assigned)))],
          { id: "assignment" },
        )
      : el("p", { id: "assignment", class: "none" }, "not assigned"),
    el("h3", {}, "Assignment history (newest first)"),
    table(["time", "epoch", "reason", "supervisor", "from", "generation", "package"], historyRows, { id: "history" }),
    el("h3", {}, "Workers"),
    table(["supervisor", "state", "pid", "epoch", "restarts", "batch", "rows/s", "Spark", "heartbeat", "error"], workerRows, { id: "workers" }),
    standbyView(placement.standby_worker),
    el("h3", {}, "Crashes"),
    table(["time", "supervisor", "ended by", "restarts", "error"], crashRows, { id: "crashes" }),
    el("h3", {}, "Log"),
    logView(name),
    el("h3", {}, "Conf (secrets redacted)"),
    table(["key", "value"], confRows, { id: "conf" }),
  ];
}

// The run history's timeline; nothing where this nimbus has no runs route (404).
function runsView(name) {
  const runs = state.runs;
  if (!runs || runs === "none" || runs.pipeline !== name) return null;
  return [el("h3", {}, "Runs"), StratusCharts.runsTimeline(runs.runs, Date.now() / 1000)];
}

const logs = { name: null, text: "", error: null };

function logView(name) {
  if (!may("submit")) return el("p", { class: "none" }, "a worker's log needs the submit role");
  const shown = logs.name === name ? logs : { text: "", error: null };
  return el(
    "div",
    { id: "log" },
    el("button", { id: "log-load", onclick: () => loadLog(name) }, `load the last ${LOG_TAIL_LINES} lines`),
    shown.error ? el("p", { class: "error" }, shown.error) : null,
    shown.text ? el("pre", { class: "log" }, shown.text) : null,
  );
}

async function loadLog(name) {
  logs.name = name;
  try {
    const headers = state.token ? { Authorization: `Bearer ${state.token}` } : {};
    const path = `/api/v1/pipelines/${encodeURIComponent(name)}/logs?tail=${LOG_TAIL_LINES}`;
    const response = await fetch(path, { headers });
    const text = await response.text();
    if (!response.ok) {
      let message = text;
      try {
        message = JSON.parse(text).message;
      } catch {}
      logs.text = "";
      logs.error = message;
    } else {
      logs.text = text.split("\n").slice(-LOG_TAIL_LINES).join("\n");
      logs.error = null;
    }
  } catch (error) {
    logs.error = String(error);
  }
  render();
}

function actions(record) {
  const path = `/api/v1/pipelines/${encodeURIComponent(record.name)}`;
  const button = (label, action, body) =>
    el("button", { id: `action-${action}`, onclick: () => act(`${label} ${record.name}`, `${path}/${action}`, body) }, label);
  const live = !["KILLED", "FAILED", "FINISHED"].includes(record.status);
  return el(
    "div",
    { id: "actions", class: "action" },
    live && record.status !== "ACTIVE" ? button("activate", "activate", {}) : null,
    live && record.status === "ACTIVE" ? button("deactivate", "deactivate", {}) : null,
    ["FAILED", "FINISHED", "ACTIVE"].includes(record.status)
      ? button("restart", "restart", { request_id: crypto.randomUUID() })
      : null,
    (record.versions || []).some((kept) => kept.version !== record.version) && record.status !== "KILLED"
      ? button("rollback", "rollback", { request_id: crypto.randomUUID() })
      : null,
    record.status !== "KILLED" ? button("kill", "kill", {}) : null,
    live
      ? el(
          "form",
          {
            id: "rebalance-form",
            onsubmit: (event) => {
              settle(event);
              let conf;
              try {
                conf = JSON.parse(event.target.elements.conf.value);
              } catch (error) {
                state.notice = { ok: false, text: `rebalance: the conf is not JSON (${error.message})` };
                render();
                return;
              }
              act(`rebalance ${record.name}`, `${path}/rebalance`, { conf, request_id: crypto.randomUUID() }, event.target);
            },
          },
          el("input", { name: "conf", placeholder: '{"spark.executor.cores": 2}', required: true }),
          el("button", { type: "submit" }, "rebalance"),
        )
      : null,
    live
      ? el(
          "form",
          { id: "update-form", onsubmit: (event) => onUpdatePackage(event, record.name) },
          el("input", { type: "file", name: "package", required: true, accept: ".zip" }),
          el("input", { name: "conf", placeholder: "conf (JSON)" }),
          el("button", { type: "submit" }, "update"),
        )
      : null,
  );
}

async function act(what, path, body, form) {
  if (what.startsWith("kill") && !confirm(`${what}? Its worker stops; its checkpoints are kept.`)) return;
  try {
    const record = await leaderCall(path, jsonPost(body));
    state.notice = { ok: true, text: `${what}: done, now ${record.status}` };
    if (form) resetForm(form.id);
  } catch (error) {
    state.notice = { ok: false, text: `${what}: ${error.message}` };
  }
  await refresh();
}

function packageForm(form, extra) {
  return () => {
    const data = new FormData();
    data.append("package", form.elements.package.files[0]);
    data.append("conf", form.elements.conf.value.trim() || "{}");
    data.append("request_id", extra.requestId);
    if (extra.name) data.append("name", extra.name);
    return { method: "POST", body: data };
  };
}

async function onSubmitPackage(event) {
  settle(event);
  const form = event.target;
  const name = form.elements.name.value.trim();
  try {
    const record = await leaderCall("/api/v1/pipelines", packageForm(form, { name, requestId: crypto.randomUUID() }));
    state.notice = { ok: true, text: `submitted ${record.name}: ${record.status}` };
    resetForm(form.id);
    location.hash = `#/pipelines/${encodeURIComponent(record.name)}`;
  } catch (error) {
    state.notice = { ok: false, text: `submit: ${error.message}` };
  }
  await refresh();
}

async function onUpdatePackage(event, name) {
  settle(event);
  const form = event.target;
  const path = `/api/v1/pipelines/${encodeURIComponent(name)}/update`;
  try {
    const record = await leaderCall(path, packageForm(form, { requestId: crypto.randomUUID() }));
    resetForm(form.id);
    state.notice = { ok: true, text: `update ${name}: ${record.update ? "waits for its code" : `now version ${record.version}`}` };
  } catch (error) {
    state.notice = { ok: false, text: `update ${name}: ${error.message}` };
  }
  await refresh();
}

// ------------------------------------------------------------------ render and loop

let root = null;

function render() {
  const focused = document.activeElement;
  if (focused && root && root.contains(focused) && focused.matches("input, textarea")) {
    return; // never wipe what the user is typing; the next round renders
  }
  const where = route();
  const body = where.view === "pipeline" ? pipelineView(where.name) : clusterView();
  const attrs = { id: "ui", "data-view": where.view, "data-round": state.rounds };
  const next = el("main", attrs, header(), banners(), body);
  if (root) {
    carryInputs(root, next);
    root.replaceWith(next);
  } else document.body.append(next);
  root = next;
}

// What the user typed or chose (a package file) survives the refresh: the old input
// elements move into the new page in place of their fresh copies.
function carryInputs(from, to) {
  for (const old of from.querySelectorAll("form[id] input[name]")) {
    const fresh = to.querySelector(`#${old.form.id} input[name="${old.name}"]`);
    if (fresh) fresh.replaceWith(old);
  }
}

// Clear a form once its action is done: the live one, whose inputs may have moved since.
function resetForm(id) {
  const live = document.getElementById(id);
  if (live) live.reset();
}

// A form sent: no page reload, and the focus leaves its input so that refreshes go on.
function settle(event) {
  event.preventDefault();
  if (document.activeElement) document.activeElement.blur();
}

function start() {
  const fallback = document.getElementById("status");
  if (fallback) fallback.remove(); // the server-rendered page, for readers without JavaScript
  render();
  refresh();
  setInterval(() => {
    if (!document.hidden) refresh();
  }, POLL_MS);
  window.addEventListener("hashchange", () => {
    state.notice = null;
    state.pipeline = null;
    state.series = null;
    state.runs = null;
    render();
    refresh();
  });
}

start();
