// Connector page: state and controls, tasks (worker, state, the full trace of a failed one),
// throughput, the configuration as the API returns it (secrets masked there), topics, offsets
// (edited while STOPPED) and a link to the dead letter queue inspector.

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { badge, confirmAction, el, figure, replace } from "./dom.js";
import { parseExposition, perConnector } from "./metrics.js";
import { sparkline } from "./sparkline.js";
import { offsetsPanel } from "./offsets.js";
import { DLQ_TOPIC_KEY } from "./dlq.js";
import { POLL_MS } from "./overview.js";

export function renderConnector(view, context, name) {
  const base = `/connectors/${encode(name)}`;
  const parts = {
    state: el("span", { id: "connector-state" }),
    message: el("p", { id: "action-message", role: "status" }),
    figures: el("div", { id: "connector-figures", class: "card" }),
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
        call("GET", "/metrics", { text: true }).catch(asMessage),
      ]);
      if (stopped) return;
      drawState(parts, status);
      drawTasks(parts.tasks, status);
      drawFigures(parts.figures, context, name, metrics);
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
  if (typeof metrics === "string" && metrics.startsWith("(not available")) {
    replace(node, el("span", { class: "muted" }, `Throughput ${metrics}`));
    return;
  }
  const totals = perConnector(parseExposition(metrics)).get(name) || { in: 0, out: 0, errors: 0, lag: 0, hasLag: false };
  context.history.add(new Map([[name, totals]]));
  const series = context.history.of(name);
  replace(node,
    stat("records-in", "records in", figure(totals.in)),
    stat("records-out", "records out", figure(totals.out)),
    stat("rate-out", "out /s", figure(series.rateOut)),
    stat("errors", "record errors", figure(totals.errors)),
    stat("lag", "consumer lag", totals.hasLag ? figure(totals.lag) : "—"),
    el("div", { class: "stat" }, sparkline(series.out, { width: 240, height: 40, label: "records out per second" }), el("span", { class: "label" }, "out /s, last minutes")));
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
