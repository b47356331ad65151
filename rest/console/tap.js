// Live tap (#/connectors/<name>/tap): a sample of the next records the connector moves, as
// POST /connectors/{name}/tap decodes them (after transforms, through the connector's converters).
// Records are data, so the page needs the operator role on the connector, as the DLQ inspector does.

import { Unauthorized, call, encode } from "./api.js";
import { el, replace } from "./dom.js";

/** The API's bounds (sluice.worker.observability.tap: MAX_COUNT, MAX_TIMEOUT_S). */
const MAX_COUNT = 100;
const MAX_TIMEOUT_S = 30;

export function renderTap(view, context, name) {
  const base = `/connectors/${encode(name)}`;
  const status = el("p", { id: "tap-status", role: "status" });
  const section = el("section", { id: "tap-page", "data-connector": name },
    el("h1", {}, "Live tap of ", el("a", { href: `#/connectors/${encode(name)}` }, name)), status);
  replace(view, section);
  if (!context.identity.can("operate", name)) {
    status.className = "muted";
    status.textContent = "Tapping a connector needs the operator role on it: its records are data.";
    return () => {};
  }
  const count = el("input", { id: "tap-count", type: "number", min: 1, max: MAX_COUNT, value: 10, class: "short" });
  const timeout = el("input", { id: "tap-timeout", type: "number", min: 1, max: MAX_TIMEOUT_S, value: 10, class: "short" });
  const rows = el("tbody");
  let left = false;
  const button = el("button", { id: "btn-tap", type: "button" }, "Sample");
  button.addEventListener("click", async () => {
    const wanted = Number(count.value);
    const seconds = Number(timeout.value);
    if (!(wanted >= 1 && wanted <= MAX_COUNT && Number.isInteger(wanted)) || !(seconds > 0 && seconds <= MAX_TIMEOUT_S)) {
      show(status, "error", "", `Give a count from 1 to ${MAX_COUNT} and a timeout of at most ${MAX_TIMEOUT_S} s.`);
      return;
    }
    button.disabled = true;
    show(status, "muted", "waiting", `Waiting for the next ${wanted} record(s), for at most ${seconds} s…`);
    try {
      const answer = await call("POST", `${base}/tap?count=${wanted}&timeout=${seconds}`);
      if (left) return;
      drawRecords(rows, answer.records || []);
      const got = (answer.records || []).length;
      const unreachable = (answer.unreachable || []).length ? ` Workers that did not answer: ${answer.unreachable.join(", ")}.` : "";
      show(status, answer.complete ? "ok" : "muted", answer.complete ? "complete" : "timed-out",
        (answer.complete ? `Complete: ${got} record(s).` : `Timed out with ${got} record(s).`) + unreachable);
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      show(status, "error", "failed", `The tap failed: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  });
  section.append(
    el("p", { class: "muted" }, "The next records the connector's tasks move — a source's as its consumers read them, a sink's as its task gets them — decoded by its converters. Nothing changes: the records go where they went."),
    el("div", { class: "toolbar" }, el("label", {}, "records ", count), el("label", {}, "timeout (s) ", timeout), button),
    el("table", { id: "tap-records" }, el("thead", {}, el("tr", {},
      ["Task", "Topic", "Partition@offset", "Key", "Value", "Headers"].map((h) => el("th", {}, h)))), rows));
  drawRecords(rows, null);
  return () => { left = true; };
}

function show(node, kind, state, text) {
  node.className = kind;
  node.dataset.state = state;
  node.textContent = text;
}

function drawRecords(body, records) {
  if (!records || !records.length) {
    replace(body, el("tr", {}, el("td", { colspan: 6, class: "muted" }, records ? "No records moved in time." : "Press Sample to tap the connector.")));
    return;
  }
  replace(body, records.map((record, index) => el("tr", { "data-index": index },
    el("td", { class: "num tap-task" }, String(record.task ?? "")),
    el("td", { class: "tap-topic" }, record.topic ?? ""),
    el("td", { class: "tap-position" }, record.partition === undefined || record.partition === null ? "—" : `${record.partition}@${record.offset ?? "?"}`),
    el("td", { class: "tap-key" }, json(record.key, false)),
    el("td", { class: "tap-value" }, json(record.value, true)),
    el("td", { class: "tap-headers" }, (record.headers || []).map((h) => el("div", {}, `${h.key}: `, json(h.value, false)))))));
}

/** A decoded key, value or header value: text as it is, anything else as JSON (indented for values). */
function json(value, pretty) {
  if (value === null || value === undefined) return el("span", { class: "muted" }, "null");
  if (typeof value === "string") return el("span", { class: "text" }, value);
  const text = JSON.stringify(value, null, pretty ? 2 : 0);
  return pretty ? el("pre", { class: "tap-json" }, text) : el("code", {}, text);
}
