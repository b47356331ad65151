// Overview: the worker's health, the counts, and every connector the caller may see with its
// tasks, throughput, errors, lag and a sparkline of its output rate, refreshed every few seconds.

import { ApiError, Unauthorized, call } from "./api.js";
import { badge, el, figure, replace } from "./dom.js";
import { fetchFigures } from "./metrics.js";
import { sparkline } from "./sparkline.js";

export const POLL_MS = 2000;

export function renderOverview(view, context) {
  const filter = el("input", { id: "filter", type: "search", placeholder: "Filter by name, state, type or class", "aria-label": "Filter connectors" });
  const health = el("div", { id: "health", class: "card" }, "…");
  const counts = el("div", { id: "counts", class: "counts" });
  const note = el("p", { id: "metrics-note", class: "muted" });
  const body = el("tbody");
  const table = el("table", { id: "connectors" },
    el("thead", {}, el("tr", {}, ["Connector", "Type", "State", "Tasks", "In /s", "Out /s", "Errors", "Lag", "Last minutes (out /s)"].map((h) => el("th", {}, h)))),
    body);
  const section = el("section", { id: "overview" }, el("h1", {}, "Overview"), health, counts, el("div", { class: "toolbar" }, filter), table, note);
  replace(view, section);
  let latest = null;
  let stopped = false;
  filter.addEventListener("input", () => latest && drawConnectorRows(body, latest, context.history, filter.value, section));

  async function refresh() {
    const started = performance.now();
    try {
      const refused = (error) => (error instanceof ApiError ? error : Promise.reject(error));
      const [connectors, healthBody, info, metrics, cluster] = await Promise.all([
        call("GET", "/connectors?expand=status&expand=info"),
        fetchHealth(),
        call("GET", "/"),
        fetchFigures().catch(refused),
        call("GET", "/cluster?health=true").catch(refused),
      ]);
      if (stopped) return;
      const figures = metrics instanceof ApiError ? null : metrics.figures;
      if (figures) context.history.add(figures);
      note.textContent = figures
        ? (metrics.unreachable.length ? `Figures without worker(s) ${metrics.unreachable.join(", ")}: they did not answer.` : "")
        : `Throughput, errors and lag come from /cluster/metrics, which answered: ${metrics.message}`;
      latest = { connectors, figures };
      drawHealth(health, healthBody, info, connectors, cluster);
      drawCounts(counts, connectors);
      drawConnectorRows(body, latest, context.history, filter.value, section);
      // A whole refresh (its calls, parsing and drawing), for the browser test to report.
      section.dataset.refreshMs = (performance.now() - started).toFixed(1);
      section.dataset.refreshes = String(Number(section.dataset.refreshes || 0) + 1);
    } catch (error) {
      if (error instanceof Unauthorized) { stopped = true; context.expired(); return; }
      note.textContent = `Refresh failed: ${error.message}`;
    }
  }

  refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => { stopped = true; clearInterval(timer); };
}

async function fetchHealth() {
  // /health answers 500 or 503 with a body that says why: show it rather than an error.
  const response = await fetch("/health", { credentials: "same-origin", cache: "no-store" });
  return response.json().catch(() => ({ status: `HTTP ${response.status}`, message: "" }));
}

function drawHealth(node, health, info, connectors, cluster) {
  const running = new Set();
  for (const entry of Object.values(connectors)) {
    const status = entry.status;
    if (!status) continue;
    if (status.connector && status.connector.worker_id) running.add(status.connector.worker_id);
    for (const task of status.tasks || []) if (task.worker_id) running.add(task.worker_id);
  }
  replace(node,
    el("div", {}, el("strong", {}, "This worker: "), el("span", { id: "health-status", class: `health-${health.status}` }, health.status), " ", el("span", { class: "muted" }, health.message || "")),
    el("div", { class: "muted" }, `Sluice ${info.version} · Kafka cluster ${info.kafka_cluster_id || "?"}`),
    drawWorkers(cluster, running));
}

/** The cluster's workers from GET /cluster, the leader marked; without the viewer role on * (which
 * it needs) the workers seen in the connectors' statuses instead. */
function drawWorkers(cluster, running) {
  if (cluster instanceof ApiError) {
    return el("div", {}, el("strong", {}, "Workers running these connectors: "), el("span", { id: "workers" }, [...running].sort().join(", ") || "none yet"),
      el("span", { class: "muted" }, ` (the cluster's own list: ${cluster.message})`));
  }
  const items = cluster.workers.map((worker) => el("li", { "data-worker": worker.id, "data-health": (worker.health || {}).status || "", class: worker.leader ? "leader" : null },
    worker.id, worker.leader ? el("span", { class: "tag worker-leader" }, "leader") : null,
    workerHealth(worker.health),
    worker.id === cluster.worker_id ? el("span", { class: "muted" }, " (this worker)") : null));
  const mode = cluster.mode === "standalone" ? "standalone: one worker, no leader" : `distributed: ${cluster.workers.length} worker(s), leader ${cluster.leader || "not elected yet"}`;
  return el("div", { id: "cluster", "data-mode": cluster.mode, "data-leader": cluster.leader || "" },
    el("strong", {}, "Workers: "), el("span", { class: "muted" }, mode),
    el("ul", { id: "cluster-workers" }, items));
}

/** A worker's own /health, as GET /cluster?health=true gathered it: its status, and why when not healthy. */
function workerHealth(health) {
  if (!health) return null;
  return el("span", { class: `worker-health health-${health.status}`, title: health.message || "" },
    health.status, health.status === "healthy" || !health.message ? "" : `: ${health.message}`);
}

function drawCounts(node, connectors) {
  const tally = { RUNNING: 0, FAILED: 0, PAUSED: 0, STOPPED: 0, other: 0 };
  let failedTasks = 0;
  for (const entry of Object.values(connectors)) {
    const state = entry.status && entry.status.connector ? entry.status.connector.state : "UNASSIGNED";
    if (state in tally) tally[state] += 1; else tally.other += 1;
    failedTasks += ((entry.status && entry.status.tasks) || []).filter((t) => t.state === "FAILED").length;
  }
  replace(node,
    count("total", "connectors", Object.keys(connectors).length),
    count("running", "running", tally.RUNNING),
    count("failed", "failed", tally.FAILED),
    count("paused", "paused", tally.PAUSED),
    count("stopped", "stopped", tally.STOPPED),
    count("failed-tasks", "failed tasks", failedTasks));
}

function count(id, label, value) {
  return el("div", { class: `count count-${id}` }, el("span", { id: `count-${id}`, class: "value" }, String(value)), el("span", { class: "label" }, label));
}

/** The connector rows for ``latest`` ({connectors, figures}) matching ``query``; the time it took
 * goes to ``section.dataset.renderMs`` (the browser test reports it). */
export function drawConnectorRows(body, latest, history, query, section) {
  const started = performance.now();
  const needle = query.trim().toLowerCase();
  const rows = [];
  for (const name of Object.keys(latest.connectors).sort()) {
    const entry = latest.connectors[name];
    const status = entry.status || {};
    const info = entry.info || {};
    const state = status.connector ? status.connector.state : "UNASSIGNED";
    const cls = (info.config && info.config["connector.class"]) || "";
    const haystack = `${name} ${state} ${info.type || status.type || ""} ${cls}`.toLowerCase();
    if (needle && !haystack.includes(needle)) continue;
    rows.push(row(name, status, info, state, latest.figures, history));
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 9, class: "muted" }, needle ? "No connector matches the filter." : "No connectors yet.")));
  replace(body, rows);
  section.dataset.renderMs = (performance.now() - started).toFixed(1);
  section.dataset.rows = String(rows.length);
}

function row(name, status, info, state, figures, history) {
  const tasks = status.tasks || [];
  const series = history.of(name);
  const figure_ = figures ? figures.get(name) : null;
  return el("tr", { "data-connector": name },
    el("td", {}, el("a", { href: `#/connectors/${encodeURIComponent(name)}` }, name)),
    el("td", {}, info.type || status.type || ""),
    el("td", { class: "state" }, badge(state)),
    el("td", { class: "tasks" }, tasks.length ? tasks.map((t) => badge(t.state)) : el("span", { class: "muted" }, "none")),
    el("td", { class: "num rate-in" }, figure(series.rateIn)),
    el("td", { class: "num rate-out" }, figure(series.rateOut)),
    el("td", { class: "num errors" }, figure_ ? figure(figure_.errors) : "—"),
    el("td", { class: "num lag" }, figure_ && figure_.hasLag ? figure(figure_.lag) : "—"),
    el("td", { class: "spark-cell" }, sparkline(series.out, { label: `${name}: records out per second` })));
}
