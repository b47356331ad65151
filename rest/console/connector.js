// Connector page: state and controls, tasks (worker, state, the full trace of a failed one),
// throughput, the configuration as the API returns it (secrets masked there), topics, offsets
// (edited while STOPPED) and a link to the dead letter queue inspector.

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { badge, confirmAction, el, figure, replace } from "./dom.js";
import { SPANS, fetchFigures } from "./metrics.js";
import { chart } from "./sparkline.js";
import { offsetsPanel } from "./offsets.js";
import { DLQ_TOPIC_KEY } from "./dlq.js";
import { POLL_MS } from "./overview.js";

export function renderConnector(view, context, name) {
  const base = `/connectors/${encode(name)}`;
  const parts = {
    base,
    state: el("span", { id: "connector-state" }),
    message: el("p", { id: "action-message", role: "status" }),
    figures: el("div", { id: "connector-figures", class: "card" }),
    charts: el("div", { id: "charts" }),
    tasks: el("tbody"),
    config: el("pre", { id: "config" }),
    topics: el("ul", { id: "topics" }),
    dlq: el("p", { id: "dlq-link" }),
  };
  // Records are data: the live tap needs the operator role on the connector, as the DLQ does.
  const tap = context.identity.can("operate", name)
    ? el("a", { id: "btn-tap-page", class: "button", href: `#/connectors/${encode(name)}/tap` }, "Live tap")
    : null;
  const offsets = offsetsPanel(context, name, base, () => refresh());
  const section = el("section", { id: "connector-page", "data-connector": name },
    el("h1", {}, el("span", { id: "connector-name" }, name), " ", parts.state),
    controls(context, name, base, parts.message, () => refresh()),
    tap ? el("p", { id: "tap-link" }, tap, el("span", { class: "muted" }, " the next records it moves, decoded.")) : null,
    parts.message,
    parts.figures,
    chartsPanel(parts, () => drawCharts(parts, context, name)),
    el("h2", {}, "Tasks"),
    el("table", { id: "tasks" }, el("thead", {}, el("tr", {}, ["Task", "State", "Worker", "Trace"].map((h) => el("th", {}, h)))), parts.tasks),
    el("div", { class: "columns" },
      el("div", {}, el("h2", {}, "Configuration"), el("p", { class: "muted" }, "As the REST API returns it: password values are masked there, ${provider:...} references shown as written."), parts.config),
      el("div", {}, el("h2", {}, "Topics"), parts.topics, el("h2", {}, "Dead letter queue"), parts.dlq, el("h2", {}, "Offsets"), offsets.node)));
  replace(view, section);
  let stopped = false;

  async function refresh() {
    try {
      const [info, status] = await Promise.all([call("GET", base), call("GET", `${base}/status`)]);
      const [topics, stored, metrics] = await Promise.all([
        call("GET", `${base}/topics`).catch(asMessage),
        call("GET", `${base}/offsets`).catch(asMessage),
        fetchFigures().catch(asMessage),
      ]);
      if (stopped) return;
      drawState(parts, status);
      drawTasks(parts.tasks, status);
      drawFigures(parts.figures, context, name, metrics);
      await loadHistory(parts, base);
      if (stopped) return;
      drawCharts(parts, context, name);
      parts.config.textContent = JSON.stringify(info.config, null, 2);
      drawTopics(parts.topics, name, topics);
      offsets.update((status.connector || {}).state, stored);
      drawDlqLink(parts.dlq, context, name, info.config);
    } catch (error) {
      if (error instanceof Unauthorized) { stopped = true; context.expired(); return; }
      if (stopped) return;
      parts.message.className = "error";
      parts.message.textContent = error instanceof ApiError && error.status === 404 ? `No connector ${name} (or it was deleted).` : `Refresh failed: ${error.message}`;
    }
  }

  refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => { stopped = true; clearInterval(timer); };
}

function asMessage(error) {
  if (error instanceof Unauthorized) throw error;
  return `(not available: ${error.message})`;
}

function controls(context, name, base, message, refresh) {
  const identity = context.identity;
  const buttons = [];
  const act = (label, method, path, question) => async () => {
    if (question && !(await confirmAction(question))) return;
    try {
      await call(method, path);
      message.className = "ok";
      message.textContent = `${label}: done.`;
      if (method === "DELETE") { location.hash = "#/"; return; }
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      message.className = "error";
      message.textContent = `${label} failed: ${error.message}`;
    }
    refresh();
  };
  if (identity.can("operate", name)) {
    const includeTasks = el("input", { id: "restart-include-tasks", type: "checkbox" });
    const onlyFailed = el("input", { id: "restart-only-failed", type: "checkbox" });
    buttons.push(
      el("button", { id: "btn-pause", type: "button", onclick: act("Pause", "PUT", `${base}/pause`) }, "Pause"),
      el("button", { id: "btn-resume", type: "button", onclick: act("Resume", "PUT", `${base}/resume`) }, "Resume"),
      el("button", { id: "btn-stop", type: "button", onclick: act("Stop", "PUT", `${base}/stop`, `Stop ${name}? Its tasks shut down until it is resumed.`) }, "Stop"),
      el("span", { class: "restart" },
        el("button", { id: "btn-restart", type: "button", onclick: () => act("Restart", "POST", `${base}/restart?includeTasks=${includeTasks.checked}&onlyFailed=${onlyFailed.checked}`, `Restart ${name}${includeTasks.checked ? " and its tasks" : ""}${onlyFailed.checked ? " (only failed ones)" : ""}?`)() }, "Restart"),
        el("label", {}, includeTasks, "include tasks"),
        el("label", {}, onlyFailed, "only failed")));
  }
  if (identity.can("admin", name)) {
    buttons.push(
      el("a", { id: "btn-edit", class: "button", href: `#/connectors/${encode(name)}/edit` }, "Edit"),
      el("button", { id: "btn-delete", type: "button", class: "danger", onclick: act("Delete", "DELETE", base, `Delete ${name}? Its configuration and tasks are removed.`) }, "Delete"));
  }
  return el("div", { id: "controls", class: "toolbar" }, buttons.length ? buttons : el("span", { class: "muted" }, "Read-only: your role allows viewing this connector."));
}

function drawState(parts, status) {
  const connector = status.connector || {};
  replace(parts.state, badge(connector.state), el("span", { class: "muted" }, ` ${status.type || ""} on ${connector.worker_id || "?"}`));
  parts.state.dataset.state = connector.state || "";
}

function drawTasks(body, status) {
  const tasks = status.tasks || [];
  const rows = tasks.map((task) => el("tr", { "data-task": task.id },
    el("td", {}, String(task.id)),
    el("td", { class: "state" }, badge(task.state)),
    el("td", { class: "worker" }, task.worker_id || ""),
    el("td", {}, task.trace ? el("details", { open: task.state === "FAILED" }, el("summary", {}, firstLine(task.trace)), el("pre", { class: "trace" }, task.trace)) : "")));
  replace(body, rows.length ? rows : el("tr", {}, el("td", { colspan: 4, class: "muted" }, "No tasks.")));
}

function firstLine(text) {
  const line = text.split("\n").find((l) => l.trim()) || text;
  return line.length > 140 ? line.slice(0, 140) + "…" : line;
}

function drawFigures(node, context, name, metrics) {
  if (typeof metrics === "string") {
    replace(node, el("span", { class: "muted" }, `Throughput ${metrics}`));
    return;
  }
  // Summed over every worker that runs a task of it; a worker that did not answer is named.
  const totals = metrics.figures.get(name) || { in: 0, out: 0, errors: 0, lag: 0, hasLag: false };
  context.history.add(new Map([[name, totals]]));
  const series = context.history.of(name);
  replace(node,
    stat("records-in", "records in", figure(totals.in)),
    stat("records-out", "records out", figure(totals.out)),
    stat("rate-in", "in /s", figure(series.rateIn)),
    stat("rate-out", "out /s", figure(series.rateOut)),
    stat("errors", "record errors", figure(totals.errors)),
    stat("lag", "consumer lag", totals.hasLag ? figure(totals.lag) : "—"),
    metrics.unreachable.length ? el("p", { id: "figures-unreachable", class: "error" }, `Without worker(s) ${metrics.unreachable.join(", ")}: they did not answer.`) : null);
}

/** The throughput and lag charts with their span choice (the last minutes, or the last hour). */
function chartsPanel(parts, redraw) {
  const span = el("select", { id: "chart-span", "aria-label": "Chart span" },
    Object.entries(SPANS).map(([value, { label }]) => el("option", { value }, `last ${label}`)));
  span.addEventListener("change", () => { parts.history = null; loadHistory(parts, parts.base).catch(() => {}).then(redraw); });
  parts.span = span;
  return el("div", { class: "card" },
    el("div", { class: "toolbar" }, el("strong", {}, "Charts "), span,
      el("span", { id: "chart-source", class: "muted" })),
    parts.charts);
}

/** The last hour as the workers sampled it (GET …/metrics/history), read again every 10 s while shown. */
async function loadHistory(parts, base) {
  if (parts.span.value !== "1h" || (parts.history && Date.now() - parts.history.at < 10_000)) return;
  try {
    const answer = await call("GET", `${base}/metrics/history`);
    parts.history = { at: Date.now(), points: answer.points, interval: answer.interval_ms, unreachable: answer.unreachable };
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    parts.history = { at: Date.now(), points: null, error: error.message };
  }
}

function drawCharts(parts, context, name) {
  const span = parts.span.value;
  const fromWorkers = span === "1h" && parts.history && parts.history.points;
  const points = fromWorkers ? parts.history.points : context.history.points(name, span);
  parts.charts.dataset.source = fromWorkers ? "workers" : "tab";
  parts.charts.dataset.points = String(points.length);
  document.getElementById("chart-source").textContent = fromWorkers
    ? `as the workers sampled it, every ${parts.history.interval / 1000} s${parts.history.unreachable.length ? ` (without ${parts.history.unreachable.join(", ")}: no answer)` : ""}`
    : span === "1h" ? `this tab's own polls (the workers' history: ${(parts.history && parts.history.error) || "not read yet"})` : "every poll of this tab (2 s)";
  const options = { spanMs: SPANS[span].seconds * 1000, width: 460, height: 120 };
  const lags = points.some((p) => p.lag !== null);
  replace(parts.charts,
    el("figure", { id: "chart-throughput" }, chart(points, { in: "line-in", out: "line-out" }, { ...options, label: "records per second in and out", unit: " /s" }),
      el("figcaption", {}, "Records per second: ", el("span", { class: "legend-in" }, "in (dashed)"), ", ", el("span", { class: "legend-out" }, "out"))),
    lags ? el("figure", { id: "chart-lag" }, chart(points, { lag: "line-lag" }, { ...options, label: "consumer lag in records" }),
      el("figcaption", {}, el("span", { class: "legend-lag" }, "Consumer lag"), " (records behind the end of its topics)")) : null);
}

function stat(id, label, value) {
  return el("div", { class: "stat" }, el("span", { id, class: "value" }, value), el("span", { class: "label" }, label));
}

function drawDlqLink(node, context, name, config) {
  const topic = config[DLQ_TOPIC_KEY];
  if (!topic) { replace(node, el("span", { class: "muted" }, "none configured")); return; }
  if (node.dataset.topic === topic) return;
  node.dataset.topic = topic;
  replace(node, `Topic ${topic}. `, context.identity.can("operate", name)
    ? el("a", { id: "btn-dlq", class: "button", href: `#/connectors/${encode(name)}/dlq` }, "Inspect dead letters")
    : el("span", { class: "muted" }, "Reading it needs the operator role."));
}

function drawTopics(node, name, topics) {
  if (typeof topics === "string") { replace(node, el("li", { class: "muted" }, topics)); return; }
  const list = (topics[name] && topics[name].topics) || [];
  replace(node, list.length ? list.map((t) => el("li", {}, t)) : el("li", { class: "muted" }, "none recorded yet"));
}
