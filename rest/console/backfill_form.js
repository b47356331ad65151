// New backfill: a form generated from GET /backfills/kinds (each kind's sections and fields with their
// types, defaults, documentation and choices, derived by the worker from its spec models), a JSON view
// that round-trips with the form, live validation through POST /backfills/validate (each error under
// its field, found by its path: dotted keys such as "connection.url" are one part of it), and Submit
// (POST /backfills), which validates first and stores nothing while an error remains.

import { ApiError, Unauthorized, call } from "./api.js";
import { el, parseJson, replace } from "./dom.js";

const MASKED = "[hidden]";
const STRUCTURED = new Set(["map", "object", "list"]);
const SECRET_HINT = "Secret: give a ${provider:...} reference (e.g. ${env:DB_PASSWORD} or ${file:/run/secrets/db.properties:password}) of a provider the worker declares, so the value never sits in the job's spec.";

/** The "New backfill" card: ``{node, stop}``; ``submitted`` is called after the worker stored a job. */
export function backfillForm(context, submitted) {
  const state = { forms: new Map(), form: null, values: {}, touched: new Set(), submitted: false, timer: null, slots: new Map(), stopped: false, result: null, asked: 0 };
  const ui = {
    kind: el("select", { id: "backfill-kind", "aria-label": "Job kind" }),
    kindDoc: el("p", { class: "doc" }),
    form: el("div", { id: "backfill-form" }),
    json: el("textarea", { id: "backfill-spec", rows: 18, spellcheck: "false", "aria-label": "The spec as JSON" }),
    jsonError: el("p", { id: "backfill-json-error", class: "error" }),
    errors: el("ul", { id: "backfill-errors", class: "field-error", role: "alert" }),
    message: el("p", { id: "backfill-create-message", role: "status" }),
    submit: el("button", { id: "btn-backfill-submit", type: "button" }, "Submit"),
  };
  const changed = (path) => {
    state.touched.add(pathId(path));
    ui.json.value = toJson(state.values);
    schedule();
  };
  const schedule = () => { clearTimeout(state.timer); state.timer = setTimeout(() => validate(context, state, ui), 400); };
  ui.kind.addEventListener("change", () => {
    const { id, spark, schedule: cron } = state.values;
    chooseKind(state, ui, ui.kind.value, { id, spark, schedule: cron }, changed);
    changed(["kind"]);
  });
  ui.json.addEventListener("input", () => {
    const parsed = parseJson(ui.json.value, ui.jsonError);
    if (parsed === undefined) return;
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
      ui.jsonError.textContent = "A backfill spec is a JSON object.";
      return;
    }
    ui.jsonError.textContent = "";
    touchAll(state, parsed);
    if (state.forms.has(parsed.kind) && parsed.kind !== ui.kind.value) ui.kind.value = parsed.kind;
    chooseKind(state, ui, ui.kind.value, parsed, changed, false);
    schedule();
  });
  ui.submit.addEventListener("click", () => submit(context, state, ui, submitted));
  const node = el("div", { id: "backfill-create", class: "card" },
    el("h2", {}, "New backfill"),
    el("p", { class: "muted" }, "A job spec as POST /backfills takes it (see docs/backfill.md): it runs when submitted, or on its schedule. Each change is checked by the worker (POST /backfills/validate), which stores nothing."),
    el("div", { class: "field" }, el("label", { for: "backfill-kind" }, "Kind"), ui.kind, ui.kindDoc, errorSlot(state, ["kind"])),
    el("div", { class: "columns" },
      el("div", {}, el("h3", {}, "Settings"), ui.form),
      el("div", {}, el("h3", {}, "JSON"), ui.json, ui.jsonError)),
    ui.errors, el("div", { class: "toolbar" }, ui.submit), ui.message);
  load(context, state, ui, changed);
  return { node, stop: () => { state.stopped = true; clearTimeout(state.timer); } };
}

async function load(context, state, ui, changed) {
  try {
    const forms = await call("GET", "/backfills/kinds");
    state.forms = new Map(forms.map((form) => [form.kind, form]));
    replace(ui.kind, forms.map((form) => el("option", { value: form.kind, disabled: form.installed === false }, form.installed === false ? `${form.kind} (not installed on this worker)` : form.kind)));
    const first = forms.find((form) => form.installed !== false) || forms[0];
    if (!first) return;
    ui.kind.value = first.kind;
    chooseKind(state, ui, first.kind, {}, changed);
  } catch (error) {
    report(context, ui, error);
  }
}

/** Shows ``kind``'s form over ``values`` (its required sections present, so their fields can be named).
 * From the kind select (``fromSelect``) the spec takes that kind and the JSON view is written again; from
 * the JSON view the spec keeps the kind it gives, known or not, for the worker to judge. */
function chooseKind(state, ui, kind, values, changed, fromSelect = true) {
  state.form = state.forms.get(kind) || null;
  const next = {};
  for (const [key, value] of Object.entries(values)) if (value !== undefined) next[key] = value;
  if (fromSelect) next.kind = kind;
  for (const section of state.form ? state.form.sections : []) {
    if (section.required && (next[section.name] === undefined || next[section.name] === null)) next[section.name] = {};
  }
  state.values = next;
  if (fromSelect) ui.json.value = toJson(state.values);
  ui.kindDoc.textContent = state.form ? state.form.documentation : "";
  drawForm(state, ui, changed);
}

function drawForm(state, ui, changed) {
  // Slots of the kind select and of problems without a field stay; the fields' are drawn again.
  for (const id of [...state.slots.keys()]) if (id !== pathId(["kind"])) state.slots.delete(id);
  if (!state.form) { replace(ui.form); return; }
  const fieldsets = state.form.sections.map((section) => el("fieldset", { "data-section": section.name },
    el("legend", {}, section.name, section.required ? el("span", { class: "required", title: "required" }, " *") : el("span", { class: "type" }, " optional")),
    section.documentation ? el("p", { class: "doc" }, section.documentation) : null,
    errorSlot(state, [section.name]),
    section.fields.map((field) => fieldNode(state, field, changed))));
  replace(ui.form, state.form.fields.map((field) => fieldNode(state, field, changed)), fieldsets);
  if (state.result) showErrors(state, ui, state.result);
}

function fieldNode(state, field, changed) {
  const id = `backfill-field-${field.key}`;
  const value = valueAt(state.values, field.path);
  const input = inputFor(field, id, value);
  const local = el("p", { class: "field-error backfill-json-problem" });
  const read = () => {
    if (field.type === "boolean") return input.checked;
    const text = input.value.trim();
    if (text === "") return undefined;
    if (STRUCTURED.has(field.type)) return parseJson(text, local);
    if (field.type === "integer" && /^-?\d+$/.test(text)) return Number(text);
    if (field.type === "number" && Number.isFinite(Number(text))) return Number(text);
    return field.type === "integer" || field.type === "number" || field.secret ? input.value : text;
  };
  input.addEventListener(field.type === "boolean" || field.type === "enum" ? "change" : "input", () => {
    local.textContent = "";
    const next = read();
    if (next === undefined && STRUCTURED.has(field.type) && input.value.trim() !== "") return; // not JSON (yet)
    setValue(state, field.path, next);
    changed(field.path);
  });
  const label = el("label", { for: id }, field.name,
    field.required ? el("span", { class: "required", title: "required" }, " *") : null,
    el("span", { class: "type" }, ` ${field.secret ? "secret" : field.type}`));
  return el("div", { class: "field", "data-field": field.key }, label, input,
    field.secret ? el("p", { class: "hint" }, SECRET_HINT) : null,
    field.documentation ? el("p", { class: "doc" }, field.documentation) : null,
    local, errorSlot(state, field.path, input));
}

function inputFor(field, id, value) {
  const shownDefault = field.default === null || field.default === undefined ? "" : typeof field.default === "object" ? JSON.stringify(field.default) : String(field.default);
  const attrs = { id, name: field.key, "data-key": field.key, placeholder: shownDefault };
  if (field.type === "boolean") {
    return el("input", { ...attrs, type: "checkbox", checked: value ?? field.default ?? false, title: `default: ${shownDefault || "false"}` });
  }
  if (field.type === "enum") {
    const select = el("select", attrs, el("option", { value: "" }, `default (${shownDefault || "none"})`), field.choices.map((choice) => el("option", { value: choice }, choice)));
    select.value = value ?? "";
    return select;
  }
  if (STRUCTURED.has(field.type)) {
    const area = el("textarea", { ...attrs, rows: 3, spellcheck: "false", value: value === undefined ? "" : JSON.stringify(value, null, 1) });
    area.style.width = "100%"; // CSSOM, which the page's style-src policy allows (a style attribute it would not)
    return area;
  }
  const secret = field.secret;
  return el("input", { ...attrs, type: secret ? "password" : "text", autocomplete: secret ? "new-password" : "off", value: value ?? "" });
}

/** The element a problem at ``path`` shows in (``backfill-error-<dotted path>``), registered by its path. */
function errorSlot(state, path, input = null) {
  const error = el("p", { class: "field-error", id: `backfill-error-${path.join(".")}`, "data-for": path.join("."), role: "alert" });
  state.slots.set(pathId(path), { error, input, path });
  return error;
}

async function validate(context, state, ui) {
  if (state.stopped || !state.form) return null;
  const asked = ++state.asked; // an answer to an older spec, arriving late, must not replace a newer one's
  try {
    const result = await call("POST", "/backfills/validate", { body: state.values });
    if (state.stopped || asked !== state.asked) return asked === state.asked ? null : state.result;
    state.result = result;
    showErrors(state, ui, result);
    return result;
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) {
      ui.message.className = "muted";
      ui.message.textContent = "Live validation needs the admin role on every connector; the worker still checks the spec when you submit.";
      return null;
    }
    report(context, ui, error);
    return null;
  }
}

/** Each problem under the field its path leads to (the longest registered prefix), else in the list below the form. */
function showErrors(state, ui, result) {
  const bySlot = new Map();
  const loose = [];
  for (const problem of [...result.errors, ...maskedValues(state)]) {
    let slot = null;
    for (let n = problem.path.length; n > 0 && !slot; n--) slot = state.slots.get(pathId(problem.path.slice(0, n)));
    const shown = state.submitted || [...state.touched].some((id) => id.startsWith(pathId(slot ? slot.path : problem.path).slice(0, -1)));
    if (!shown) continue;
    const text = slot && pathId(slot.path) === pathId(problem.path) ? problem.message : `${problem.key}: ${problem.message}`;
    if (slot) bySlot.set(slot, [...(bySlot.get(slot) || []), text]);
    else loose.push(text);
  }
  for (const slot of state.slots.values()) {
    const texts = bySlot.get(slot) || [];
    slot.error.textContent = texts.join(" ");
    if (slot.input) slot.input.classList.toggle("invalid", texts.length > 0);
  }
  replace(ui.errors, loose.map((text) => el("li", {}, text)));
  return bySlot.size + loose.length;
}

/** A secret the API masked cannot be sent back: it would become the password. */
function maskedValues(state) {
  const problems = [];
  for (const section of state.form ? state.form.sections : []) {
    for (const field of section.fields) {
      if (field.secret && valueAt(state.values, field.path) === MASKED) {
        problems.push({ key: field.key, path: field.path, message: "Masked by the API: enter the value again, as a ${provider:...} reference." });
      }
    }
  }
  return problems;
}

async function submit(context, state, ui, submitted) {
  state.submitted = true;
  const result = await validate(context, state, ui);
  const masked = maskedValues(state).length;
  if ((result && !result.valid) || masked) {
    ui.message.className = "error";
    ui.message.textContent = `Fix the problems marked on the form (${(result ? result.errors.length : 0) + masked}); nothing was stored.`;
    const first = [...state.slots.values()].find((slot) => slot.error.textContent);
    if (first) first.error.scrollIntoView({ block: "center" });
    return;
  }
  try {
    const info = await call("POST", "/backfills", { body: state.values });
    ui.message.className = "ok";
    ui.message.textContent = `Backfill ${info.id} submitted (${(info.status || {}).state || "stored"}).${(info.warnings || []).map((w) => ` Warning: ${w}`).join("")}`;
    submitted();
  } catch (error) {
    report(context, ui, error); // the worker's message names the bad key
  }
}

function report(context, ui, error) {
  if (error instanceof Unauthorized) { context.expired(); return; }
  ui.message.className = "error";
  ui.message.textContent = error.message;
}

function touchAll(state, values) {
  for (const [key, value] of Object.entries(values)) {
    state.touched.add(pathId([key]));
    if (value && typeof value === "object" && !Array.isArray(value)) for (const inner of Object.keys(value)) state.touched.add(pathId([key, inner]));
  }
}

function valueAt(values, path) {
  let node = values;
  for (const part of path) {
    if (!node || typeof node !== "object") return undefined;
    node = node[part];
  }
  return node;
}

/** Sets (or, for ``undefined``, removes) the value at ``path``; an optional section left empty goes. */
function setValue(state, path, value) {
  const [head, ...rest] = path;
  if (rest.length === 0) {
    if (value === undefined) delete state.values[head]; else state.values[head] = value;
    return;
  }
  const section = state.values[head] && typeof state.values[head] === "object" ? state.values[head] : {};
  if (value === undefined) delete section[rest[0]]; else section[rest[0]] = value;
  const required = state.form.sections.some((s) => s.name === head && s.required);
  if (Object.keys(section).length || required) state.values[head] = section; else delete state.values[head];
}

/** A path as a map key: JSON, since its parts may hold dots. */
function pathId(path) {
  return JSON.stringify(path);
}

function toJson(values) {
  return JSON.stringify(values, null, 2);
}
