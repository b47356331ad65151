// The connector page's offsets: shown always; edited (PATCH) or reset (DELETE) while the connector
// is STOPPED, as KIP-875 allows, by a caller with the operator role on it. The server's message is
// shown as it answers.
//
// Editing is a form by default: one row per partition, one input per offset field, each field
// keeping the JSON type it was stored with, and a reset box per row (offset null). The JSON view
// holds the same entries; switching views carries the edits across, as the config editor's do.

import { Unauthorized, call } from "./api.js";
import { confirmAction, el, parseJson, replace } from "./dom.js";

/** How a sink's partition keys (Connect's names) are labelled on the form. */
const SINK_LABELS = { kafka_topic: "topic", kafka_partition: "partition" };
const FORM_NOTE = "Edit the offsets and save (PATCH): every row is written as the form holds it; a ticked reset sends offset null for its partition.";
const JSON_NOTE = "Edit the JSON and save (PATCH): an entry with offset null resets that partition.";

/** The offsets panel; ``update(state, offsets)`` is called on every refresh of the page. */
export function offsetsPanel(context, name, base, refresh) {
  const ui = {
    view: el("pre", { id: "offsets" }),
    rows: el("tbody"),
    editor: el("textarea", { id: "offsets-editor", rows: 10, spellcheck: "false", hidden: true, "aria-label": "Offsets as JSON" }),
    message: el("p", { id: "offsets-message", role: "status" }),
    note: el("p", { id: "offsets-note", class: "muted" }),
    save: el("button", { id: "btn-offsets-save", type: "button", hidden: true }, "Save offsets"),
    add: el("button", { id: "btn-offsets-add", type: "button", hidden: true }, "Add partition"),
    toggle: el("button", { id: "btn-offsets-json", type: "button", hidden: true }, "JSON"),
    reset: el("button", { id: "btn-offsets-reset", type: "button", class: "danger", hidden: true }, "Reset offsets"),
  };
  ui.form = el("table", { id: "offsets-form", hidden: true },
    el("thead", {}, el("tr", {}, ["Partition", "Offset", "Reset"].map((h) => el("th", {}, h)))), ui.rows);
  const mayEdit = context.identity.can("operate", name);
  // dirty: the user changed something, so polls stop redrawing the form or the JSON until it is saved.
  const state = { dirty: false, json: false, latest: null, drawn: null, entries: [] };
  const touched = () => { state.dirty = true; };
  ui.editor.addEventListener("input", touched);
  ui.form.addEventListener("input", touched);
  ui.form.addEventListener("change", (event) => {
    touched();
    if (event.target.classList.contains("offset-reset")) markReset(event.target.closest("tr"), event.target.checked);
  });

  async function send(label, method, body) {
    try {
      const answer = await call(method, `${base}/offsets`, body === undefined ? {} : { body });
      ui.message.className = "ok";
      ui.message.textContent = `${label}: ${(answer && answer.message) || "done"}`;
      state.dirty = false; // the next refresh loads what the worker now holds
      refresh();
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      showError(ui.message, `${label} failed: ${error.message}`);
    }
  }

  ui.save.addEventListener("click", () => {
    const entries = state.json ? entriesFromJson(ui.editor.value, ui.message) : entriesFromForm(ui.rows, state.entries, ui.message);
    if (entries === undefined) return;
    if (!entries.length) { showError(ui.message, "Nothing to save: add a partition, or use Reset offsets to drop them all."); return; }
    send("Offsets saved", "PATCH", { offsets: entries });
  });
  ui.add.addEventListener("click", () => {
    touched();
    ui.rows.append(newRow(ui.rows.children.length));
    ui.rows.lastElementChild.querySelector("input").focus();
  });
  ui.toggle.addEventListener("click", () => switchView(ui, state));
  ui.reset.addEventListener("click", async () => {
    if (await confirmAction(`Reset every offset of ${name}? When it is resumed, it starts as a new connector would.`)) send("Offsets reset", "DELETE");
  });

  const node = el("div", { id: "offsets-panel" }, ui.note, ui.view, ui.form, ui.editor,
    el("div", { class: "toolbar" }, ui.save, ui.add, ui.toggle, ui.reset), ui.message);
  return { node, update: (connectorState, offsets) => update(ui, state, mayEdit, connectorState, offsets) };
}

/** A refresh of the page: the offsets (or why they could not be read), editable while STOPPED. */
function update(ui, state, mayEdit, connectorState, offsets) {
  state.latest = typeof offsets === "string" ? offsets : { offsets: offsets.offsets || [] };
  const stored = typeof state.latest === "string" ? null : state.latest.offsets;
  ui.view.textContent = stored === null ? state.latest : JSON.stringify(stored, null, 2);
  const editable = mayEdit && connectorState === "STOPPED" && stored !== null;
  ui.view.hidden = editable;
  ui.save.hidden = ui.reset.hidden = ui.toggle.hidden = !editable;
  ui.form.hidden = ui.add.hidden = !editable || state.json;
  ui.editor.hidden = !editable || !state.json;
  if (!editable) state.dirty = false;
  else if (!state.dirty && JSON.stringify(stored) !== state.drawn) load(ui, state, stored);
  ui.note.textContent = !mayEdit ? "" : !editable ? "Stop the connector to edit or reset its offsets." : state.json ? JSON_NOTE : FORM_NOTE;
}

/** Shows the stored offsets in both views (the user has not changed anything). */
function load(ui, state, stored) {
  state.drawn = JSON.stringify(stored);
  state.entries = stored;
  drawRows(ui.rows, stored, stored);
  ui.editor.value = JSON.stringify({ offsets: stored }, null, 2);
}

/** Form → JSON or JSON → form; refused (the message says why) while the view left holds a bad value. */
function switchView(ui, state) {
  if (state.json) {
    const entries = entriesFromJson(ui.editor.value, ui.message);
    if (entries === undefined) return;
    drawRows(ui.rows, entries, state.latest.offsets);
    state.entries = entries;
  } else {
    const entries = entriesFromForm(ui.rows, state.entries, ui.message);
    if (entries === undefined) return;
    ui.editor.value = JSON.stringify({ offsets: entries }, null, 2);
  }
  state.json = !state.json;
  ui.message.className = "";
  ui.message.textContent = "";
  ui.toggle.textContent = state.json ? "Form" : "JSON";
  ui.form.hidden = ui.add.hidden = state.json;
  ui.editor.hidden = !state.json;
  ui.note.textContent = state.json ? JSON_NOTE : FORM_NOTE;
}

/** One row per entry; an entry with offset null shows the stored offset's fields (if known) under a ticked reset. */
function drawRows(body, entries, stored) {
  replace(body, entries.map((entry, index) => {
    const template = entry.offset === null ? storedOffset(stored, entry.partition) : entry.offset;
    const fields = template && Object.keys(template).length ? Object.entries(template) : null;
    const row = el("tr", { "data-offset-row": index },
      el("td", { class: "offset-partition" }, chips(entry.partition)),
      el("td", { class: "offset-fields" }, fields
        ? fields.map(([key, value]) => fieldInput(key, value))
        : jsonInput("offset", entry.offset === null ? "{}" : JSON.stringify(entry.offset))),
      el("td", {}, el("input", { type: "checkbox", class: "offset-reset", checked: entry.offset === null, "aria-label": `reset row ${index + 1}` })));
    markReset(row, entry.offset === null);
    return row;
  }));
}

/** A row for a partition the connector has no offset for yet: partition and offset as JSON. */
function newRow(index) {
  return el("tr", { "data-offset-row": index, "data-new": "yes" },
    el("td", { class: "offset-partition" }, jsonInput("partition", "{}")),
    el("td", { class: "offset-fields" }, jsonInput("offset", "{}")),
    el("td", {}, el("input", { type: "checkbox", class: "offset-reset", "aria-label": `reset row ${index + 1}` })));
}

function chips(partition) {
  return Object.entries(partition || {}).map(([key, value]) =>
    el("span", { class: "chip", title: key }, `${SINK_LABELS[key] || key}=${typeof value === "string" ? value : JSON.stringify(value)}`));
}

/** An input for one offset field; ``data-type`` is the JSON type its value is read back as. */
function fieldInput(key, value) {
  const type = typeof value === "number" ? (Number.isInteger(value) ? "integer" : "number")
    : typeof value === "string" || typeof value === "boolean" ? typeof value : "json";
  const text = type === "string" ? value : type === "json" ? JSON.stringify(value) : String(value);
  return el("label", { class: "offset-field" }, el("span", { class: "offset-name" }, key), " ",
    el("input", { type: "text", "data-offset-field": key, "data-type": type, value: text, spellcheck: "false", class: type === "json" ? "json" : null }),
    el("span", { class: "type" }, ` ${type}`));
}

function jsonInput(what, text) {
  return el("label", { class: "offset-field" }, el("span", { class: "offset-name" }, `${what} (JSON)`), " ",
    el("input", { type: "text", "data-offset-json": what, value: text, spellcheck: "false", class: "json" }));
}

function markReset(row, reset) {
  row.classList.toggle("offset-resetting", reset);
  for (const input of row.querySelectorAll("input[data-offset-field], input[data-offset-json='offset']")) input.disabled = reset;
}

/** The form's entries, every field read back as its JSON type; ``undefined`` after naming the first bad field. */
function entriesFromForm(body, entries, message) {
  const result = [];
  for (const row of body.querySelectorAll("tr[data-offset-row]")) {
    const index = Number(row.dataset.offsetRow);
    const where = `Row ${index + 1}${row.dataset.new ? "" : ` (${chipText(row)})`}`;
    let partition = entries[index] && entries[index].partition;
    const partitionInput = row.querySelector("input[data-offset-json='partition']");
    if (partitionInput) {
      partition = readJson(partitionInput.value, `${where}: the partition`, message);
      if (partition === undefined) return undefined;
      if (!isObject(partition) || !Object.keys(partition).length) return fail(message, `${where}: the partition must be a JSON object with its keys, e.g. {"task": 0}.`);
    }
    if (row.querySelector(".offset-reset").checked) { result.push({ partition, offset: null }); continue; }
    const offset = readOffset(row, where, message);
    if (offset === undefined) return undefined;
    result.push({ partition, offset });
  }
  return result;
}

function readOffset(row, where, message) {
  const whole = row.querySelector("input[data-offset-json='offset']");
  if (whole) {
    const offset = readJson(whole.value, `${where}: the offset`, message);
    if (offset === undefined) return undefined;
    return isObject(offset) ? offset : fail(message, `${where}: the offset must be a JSON object (or tick reset).`);
  }
  const offset = {};
  for (const input of row.querySelectorAll("input[data-offset-field]")) {
    const value = readField(input.value, input.dataset.type);
    if (value === undefined) return fail(message, `${where}: field ${input.dataset.offsetField} ${problem(input.value, input.dataset.type)}.`);
    offset[input.dataset.offsetField] = value;
  }
  return offset;
}

function problem(text, type) {
  // JSON numbers past 2^53 lose digits in a browser: refused rather than saved rounded.
  if (type === "integer" && /^-?\d+$/.test(text.trim())) return "is beyond 2^53 - 1, the largest whole number the browser holds exactly";
  return `must be ${TYPE_NAMES[type]}, not ${JSON.stringify(text)}`;
}

const TYPE_NAMES = { integer: "a whole number", number: "a number", boolean: "true or false", json: "JSON", string: "text" };

/** ``text`` as a value of ``type``, or ``undefined`` when it is not one. */
function readField(text, type) {
  const trimmed = text.trim();
  if (type === "string") return text;
  if (type === "boolean") return trimmed === "true" ? true : trimmed === "false" ? false : undefined;
  if (type === "json") { try { return JSON.parse(trimmed); } catch { return undefined; } }
  if (!/^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/.test(trimmed)) return undefined;
  const number = Number(trimmed);
  if (!Number.isFinite(number)) return undefined;
  if (type === "integer" && !Number.isSafeInteger(number)) return undefined;
  return number;
}

/** The JSON view's entries (``{"offsets": [...]}`` or the bare list); ``undefined`` after saying what is wrong. */
function entriesFromJson(text, message) {
  const parsed = parseJson(text, message);
  if (parsed === undefined) return undefined;
  const entries = Array.isArray(parsed) ? parsed : isObject(parsed) ? parsed.offsets : undefined;
  if (!Array.isArray(entries)) return fail(message, 'The JSON must be {"offsets": [...]}: a list of {"partition": {...}, "offset": {...}}.');
  for (const [index, entry] of entries.entries()) {
    if (!isObject(entry) || !isObject(entry.partition)) return fail(message, `Entry ${index + 1}: "partition" must be a JSON object.`);
    if (entry.offset !== null && !isObject(entry.offset)) return fail(message, `Entry ${index + 1}: "offset" must be a JSON object or null.`);
  }
  return entries.map((entry) => ({ partition: entry.partition, offset: entry.offset }));
}

function readJson(text, what, message) {
  try {
    return JSON.parse(text);
  } catch (error) {
    return fail(message, `${what} is not JSON: ${error.message}`);
  }
}

/** The stored offset of ``partition`` (same keys and values, in any order), or null. */
function storedOffset(stored, partition) {
  const key = canonical(partition);
  const found = (stored || []).find((entry) => canonical(entry.partition) === key);
  return found ? found.offset : null;
}

function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (isObject(value)) return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  return JSON.stringify(value);
}

function chipText(row) {
  return [...row.querySelectorAll(".chip")].map((chip) => chip.textContent).join(" ");
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function showError(message, text) {
  message.className = "error";
  message.textContent = text;
}

function fail(message, text) {
  showError(message, text);
  return undefined;
}
