// Dead letter queue inspector (#/connectors/<name>/dlq): pages of the connector's DLQ as
// GET /connectors/{name}/dlq decodes them, and a selected range of a sink's dead letters sent back
// through POST /connectors/{name}/dlq/redrive. Both need the operator role on the connector.

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { confirmAction, el, replace } from "./dom.js";
import { POLL_MS } from "./overview.js";

const PAGE = 20;
const DEFAULT_MAX_REDRIVES = 3;
/** How many bytes of a binary key, value or header the table shows as hex. */
const HEX_BYTES = 64;

/** The config key that gives a connector a DLQ (Connect's name). */
export const DLQ_TOPIC_KEY = "errors.deadletterqueue.topic.name";

export function renderDlq(view, context, name) {
  const base = `/connectors/${encode(name)}`;
  const state = { partition: 0, offset: null, page: null, type: null };
  const parts = {
    heading: el("p", { id: "dlq-topic", class: "muted" }),
    message: el("p", { id: "dlq-message", role: "status" }),
    partition: el("select", { id: "dlq-partition" }),
    rows: el("tbody"),
    range: el("span", { id: "dlq-range", class: "muted" }),
    redrive: el("div", { id: "dlq-redrive", class: "card" }),
    result: el("div", { id: "dlq-result", role: "status" }),
  };
  const prev = el("button", { id: "dlq-prev", type: "button", onclick: () => go(previousOffset(state)) }, "◀ Previous");
  const next = el("button", { id: "dlq-next", type: "button", onclick: () => go(state.page && state.page.next_offset) }, "Next ▶");
  parts.partition.addEventListener("change", () => { state.partition = Number(parts.partition.value); go(null); });
  const section = el("section", { id: "dlq-page", "data-connector": name },
    el("h1", {}, "Dead letter queue of ", el("a", { href: `#/connectors/${encode(name)}` }, name)),
    parts.heading, parts.message);
  replace(view, section);
  if (!context.identity.can("operate", name)) {
    parts.message.className = "muted";
    parts.message.textContent = "Reading a dead letter queue needs the operator role on the connector: its records are data.";
    return () => {};
  }
  section.append(
    el("div", { class: "toolbar" }, el("label", {}, "Partition ", parts.partition), prev, next, parts.range,
      el("button", { id: "dlq-refresh", type: "button", onclick: () => go(state.offset) }, "Refresh")),
    el("table", { id: "dlq-records" }, el("thead", {}, el("tr", {},
      ["", "Offset", "Time", "Key", "Value", "Headers", "Error", "Redriven"].map((h) => el("th", {}, h)))), parts.rows),
    parts.redrive, parts.result);
  let stopped = false;

  async function go(offset) {
    const query = `partition=${state.partition}&limit=${PAGE}${offset === null || offset === undefined ? "" : `&offset=${offset}`}`;
    try {
      if (state.type === null) state.type = (await call("GET", base)).type || "";
      const page = await call("GET", `${base}/dlq?${query}`);
      if (stopped) return;
      const drawn = state.page && JSON.stringify(state.page) === JSON.stringify(page);
      state.page = page;
      state.offset = page.records.length ? page.records[0].offset : offset;
      if (!drawn) draw(parts, state, { prev, next }); // unchanged: ticks and open traces stay as they are
      drawRedrive(parts, context, name, base, state);
    } catch (error) {
      if (error instanceof Unauthorized) { stopped = true; context.expired(); return; }
      parts.message.className = "error";
      parts.message.textContent = error instanceof ApiError ? error.message : `Reading the DLQ failed: ${error.message}`;
    }
  }

  go(null);
  // New dead letters arrive while the page is open: read the same page again, as the other pages poll.
  const timer = setInterval(() => go(state.offset), POLL_MS);
  return () => { stopped = true; clearInterval(timer); };
}

function bounds(state) {
  const page = state.page;
  return (page && page.partitions.find((p) => p.partition === page.partition)) || { start: 0, end: 0 };
}

function previousOffset(state) {
  const { start } = bounds(state);
  return Math.max(start, (state.offset === null ? start : state.offset) - PAGE);
}

function draw(parts, state, buttons) {
  const page = state.page;
  const { start, end } = bounds(state);
  parts.heading.textContent = `Topic ${page.topic}: ${end - start} record(s) kept in partition ${page.partition} (offsets ${start}–${Math.max(start, end - 1)}).`;
  parts.message.textContent = "";
  replace(parts.partition, page.partitions.map((p) => el("option", { value: p.partition, selected: p.partition === page.partition }, String(p.partition))));
  parts.partition.value = String(page.partition);
  const shown = page.records.length ? `${page.records[0].offset}–${page.records[page.records.length - 1].offset}` : "none";
  parts.range.textContent = `showing ${shown}`;
  buttons.prev.disabled = state.offset === null || state.offset <= start;
  buttons.next.disabled = page.next_offset === null || page.next_offset === undefined;
  const ticked = new Set([...parts.rows.querySelectorAll("input.dlq-pick:checked")].map((box) => Number(box.value)));
  const rows = page.records.map((record) => el("tr", { "data-offset": record.offset },
    el("td", {}, el("input", { type: "checkbox", class: "dlq-pick", value: record.offset, checked: ticked.has(record.offset), "aria-label": `select offset ${record.offset}` })),
    el("td", { class: "num" }, String(record.offset)),
    el("td", {}, record.timestamp ? new Date(record.timestamp).toISOString() : ""),
    el("td", { class: "dlq-key" }, payload(record.key)),
    el("td", { class: "dlq-value" }, payload(record.value)),
    el("td", { class: "dlq-headers" }, (record.headers || []).map((h) => el("div", {}, `${h.key}: `, payload(h.value)))),
    el("td", { class: "dlq-error" }, errorCell(record.error)),
    el("td", { class: "num dlq-redriven" }, String(record.redriven || 0))));
  replace(parts.rows, rows.length ? rows : el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No dead letters here.")));
}

/** A key, value or header value as the API encodes it: text, or bytes that are not UTF-8 shown as binary. */
function payload(value) {
  if (value === null || value === undefined) return el("span", { class: "muted" }, "null");
  if (value.base64 !== undefined) return binary(value.base64);
  return el("span", { class: "text" }, value.text);
}

/** Bytes that are not UTF-8: a badge, the length, the first HEX_BYTES bytes as hex, and the exact base64 to copy. */
function binary(encoded) {
  let bytes;
  try {
    bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  } catch {
    bytes = null; // not base64 after all: show what the API sent, marked, rather than guess
  }
  const copy = el("input", { type: "text", class: "base64", readonly: true, value: encoded, "aria-label": "the bytes as base64", spellcheck: "false" });
  const button = el("button", { type: "button", class: "copy-base64", title: "copy the exact bytes as base64" }, "Copy base64");
  button.addEventListener("click", () => copyText(copy, button));
  if (bytes === null) return el("span", { class: "binary" }, el("span", { class: "tag binary-tag" }, "base64"), " ", copy);
  const hex = Array.from(bytes.subarray(0, HEX_BYTES), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return el("span", { class: "binary", title: "not UTF-8: the bytes as hex" },
    el("span", { class: "tag binary-tag" }, "binary"), " ",
    el("span", { class: "byte-count" }, `${bytes.length} byte${bytes.length === 1 ? "" : "s"}`),
    el("code", { class: "hex" }, bytes.length > HEX_BYTES ? `${hex} …` : hex),
    el("details", { class: "base64-copy" }, el("summary", {}, "base64"), copy, " ", button));
}

/** The clipboard where the browser allows it; otherwise the text is selected for the user to copy. */
async function copyText(input, button) {
  input.select();
  try {
    await navigator.clipboard.writeText(input.value);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(() => { button.textContent = "Copy base64"; }, 2000);
}

function errorCell(error) {
  if (!error) return el("span", { class: "muted" }, "no context headers");
  return el("div", {},
    el("div", {}, el("span", { class: "label" }, "stage "), el("span", { class: "dlq-stage" }, error.stage || "")),
    el("div", {}, el("span", { class: "label" }, "class "), el("span", { class: "dlq-class" }, error.class || "")),
    el("div", {}, el("span", { class: "label" }, "exception "), el("span", { class: "dlq-exception" }, error.exception || "")),
    el("div", {}, el("span", { class: "label" }, "message "), el("span", { class: "dlq-error-message" }, error.message || "")),
    el("div", { class: "muted" }, `from ${error.topic ?? "?"}[${error.partition ?? "?"}]@${error.offset ?? "?"}`),
    error.stacktrace ? el("details", {}, el("summary", {}, "stack trace"), el("pre", { class: "trace dlq-stacktrace" }, error.stacktrace)) : null);
}

function drawRedrive(parts, context, name, base, state) {
  if (state.type !== "sink") {
    replace(parts.redrive, el("p", { class: "muted" }, `A ${state.type || "source"} connector's dead letters can be read, not redriven: they never came from a topic.`));
    return;
  }
  if (parts.redrive.dataset.ready === "yes") return;
  parts.redrive.dataset.ready = "yes";
  const from = el("input", { id: "dlq-from", type: "number", min: 0, class: "short" });
  const to = el("input", { id: "dlq-to", type: "number", min: 0, class: "short" });
  const max = el("input", { id: "dlq-max-redrives", type: "number", min: 1, max: 100, value: DEFAULT_MAX_REDRIVES, class: "short" });
  parts.rows.closest("table").addEventListener("change", () => {
    const picked = [...parts.rows.querySelectorAll("input.dlq-pick:checked")].map((box) => Number(box.value));
    if (!picked.length) return;
    from.value = String(Math.min(...picked));
    to.value = String(Math.max(...picked));
  });
  const button = el("button", { id: "btn-redrive", type: "button", onclick: () => redrive(parts, context, name, base, state, { from, to, max }) }, "Redrive");
  replace(parts.redrive,
    el("h2", {}, "Redrive to the source topic"),
    el("p", { class: "muted" }, "Tick records (or give the range) of this partition; each goes back to the topic it came from, where the sink reads it again."),
    el("div", { class: "toolbar" }, el("label", {}, "from ", from), el("label", {}, "to ", to), el("label", {}, "max redrives ", max), button));
}

async function redrive(parts, context, name, base, state, inputs) {
  const first = Number(inputs.from.value);
  const last = Number(inputs.to.value);
  const maxRedrives = Number(inputs.max.value || DEFAULT_MAX_REDRIVES);
  if (inputs.from.value === "" || inputs.to.value === "" || last < first) {
    showResult(parts.result, "error", "Give a range: tick records or fill from and to (from ≤ to).");
    return;
  }
  const question = `Send offsets ${first}–${last} of partition ${state.partition} of ${name}'s DLQ back to their topics? `
    + `Loop guard: a record already redriven ${maxRedrives} time(s) (max_redrives, default ${DEFAULT_MAX_REDRIVES}) stays in the DLQ. The DLQ itself is not changed.`;
  if (!(await confirmAction(question))) return;
  try {
    const answer = await call("POST", `${base}/dlq/redrive`, { body: { partition: state.partition, from_offset: first, to_offset: last, max_redrives: maxRedrives } });
    const perTopic = Object.entries(answer.topics || {}).map(([topic, count]) => el("li", {}, `${topic}: ${count}`));
    const skipped = (answer.skipped || []).map((s) => el("li", {}, `offset ${s.offset}: ${s.reason}`));
    replace(parts.result,
      el("p", { id: "dlq-redriven", class: "ok" }, `Redriven: ${answer.redriven}`),
      perTopic.length ? el("ul", { id: "dlq-redriven-topics" }, perTopic) : null,
      skipped.length ? el("div", {}, el("p", {}, `Skipped: ${skipped.length}`), el("ul", { id: "dlq-skipped" }, skipped)) : null);
  } catch (error) {
    if (error instanceof Unauthorized) { context.expired(); return; }
    showResult(parts.result, "error", `Redrive failed: ${error.message}`);
  }
}

function showResult(node, kind, text) {
  replace(node, el("p", { id: "dlq-redriven", class: kind }, text));
}
