// Create and edit: a form generated from the plugin's config definition (PUT
// /connector-plugins/{plugin}/config/validate gives groups, types, defaults, documentation and
// required keys), validated live through the same call with each error on its field, and a JSON
// view that round-trips with the form. Saving is PUT /connectors/{name}/config.

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { el, replace } from "./dom.js";

const MASKED = "[hidden]";
const SECRET_HINT = "Secrets: enter a ${provider:...} reference (e.g. ${env:DB_PASSWORD} or ${file:/run/secrets/db.properties:password}) so the value never sits in the connector's configuration.";

export function renderEditor(view, context, existing) {
  const state = { plugin: null, values: {}, definitions: [], touched: new Set(), submitted: false, timer: null, fields: new Map(), stopped: false };
  const ui = {
    plugin: el("select", { id: "plugin", "aria-label": "Connector plugin", disabled: existing !== null }),
    form: el("div", { id: "config-form" }),
    json: el("textarea", { id: "json-view", rows: 18, spellcheck: "false", "aria-label": "Configuration as JSON" }),
    jsonError: el("p", { id: "json-error", class: "error" }),
    message: el("p", { id: "editor-message", role: "status" }),
    save: el("button", { id: "btn-create", type: "button" }, existing ? "Save" : "Create"),
  };
  replace(view, el("section", { id: "editor" },
    el("h1", {}, existing ? `Edit ${existing}` : "New connector"),
    el("label", { class: "plugin-pick" }, "Plugin ", ui.plugin),
    el("p", { class: "hint" }, SECRET_HINT),
    el("div", { class: "columns" },
      el("div", {}, el("h2", {}, "Settings"), ui.form),
      el("div", {}, el("h2", {}, "JSON"), ui.json, ui.jsonError)),
    ui.message, el("div", { class: "toolbar" }, ui.save)));

  const changed = (key) => { state.touched.add(key); ui.json.value = toJson(state.values); schedule(); };
  const schedule = () => { clearTimeout(state.timer); state.timer = setTimeout(() => validate(context, state, ui), 400); };
  ui.plugin.addEventListener("change", () => choosePlugin(context, state, ui, ui.plugin.value, changed));
  ui.json.addEventListener("input", () => {
    const parsed = parseJson(ui.json.value);
    if (typeof parsed === "string") { ui.jsonError.textContent = parsed; return; }
    ui.jsonError.textContent = "";
    state.values = parsed;
    Object.keys(parsed).forEach((key) => state.touched.add(key));
    const plugin = parsed["connector.class"];
    if (plugin && plugin !== state.plugin) { ui.plugin.value = plugin; choosePlugin(context, state, ui, plugin, changed); return; }
    drawForm(state, ui, existing, changed);
    schedule();
  });
  ui.save.addEventListener("click", () => save(context, state, ui, existing));
  load(context, state, ui, existing, changed);
  return () => { state.stopped = true; clearTimeout(state.timer); };
}

async function load(context, state, ui, existing, changed) {
  try {
    const plugins = await call("GET", "/connector-plugins");
    replace(ui.plugin, el("option", { value: "" }, "Choose a plugin…"), plugins.map((p) => el("option", { value: p.class }, `${shortName(p.class)} (${p.type})`)));
    if (existing) {
      state.values = await call("GET", `/connectors/${encode(existing)}/config`);
      const plugin = state.values["connector.class"];
      if (![...ui.plugin.options].some((o) => o.value === plugin)) ui.plugin.append(el("option", { value: plugin }, plugin));
      ui.plugin.value = plugin;
      await choosePlugin(context, state, ui, plugin, changed, true);
    }
  } catch (error) {
    report(context, ui, error);
  }
}

async function choosePlugin(context, state, ui, plugin, changed, keep = false) {
  state.plugin = plugin || null;
  if (!plugin) { replace(ui.form); return; }
  if (!keep && state.values["connector.class"] !== plugin) state.values = { name: state.values.name || "", "connector.class": plugin };
  if (!state.values.name) delete state.values.name;
  ui.json.value = toJson(state.values);
  const result = await validate(context, state, ui);
  state.definitions = result ? result.configs.map((c) => c.definition) : [];
  drawForm(state, ui, keep ? state.values.name : null, changed);
  if (result) showErrors(state, ui, result);
}

function drawForm(state, ui, existing, changed) {
  state.fields = new Map();
  const known = new Set(state.definitions.map((d) => d.name));
  const extra = Object.keys(state.values).filter((key) => !known.has(key)).map((key) => ({ name: key, type: "STRING", group: "Other keys", documentation: "A key the plugin does not define.", display_name: key }));
  const main = new Map();
  const more = new Map();
  for (const definition of [...state.definitions, ...extra]) {
    const shown = definition.required || definition.importance === "HIGH" || definition.name in state.values || definition.group === "Other keys";
    const groups = shown ? main : more;
    const group = definition.group || "Settings";
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(field(state, definition, existing, changed));
  }
  const fieldsets = (groups) => [...groups].map(([group, fields]) => el("fieldset", {}, el("legend", {}, group), fields));
  replace(ui.form, fieldsets(main), more.size ? el("details", { id: "more-settings" }, el("summary", {}, `Other settings (${[...more.values()].reduce((n, f) => n + f.length, 0)})`), fieldsets(more)) : null);
}

function field(state, definition, existing, changed) {
  const key = definition.name;
  const value = state.values[key] ?? "";
  const attrs = { id: `field-${key}`, name: key, "data-key": key, placeholder: definition.default_value ?? "", value };
  let input;
  if (definition.type === "BOOLEAN") {
    input = el("select", attrs, el("option", { value: "" }, `default (${definition.default_value ?? "none"})`), el("option", { value: "true" }, "true"), el("option", { value: "false" }, "false"));
    input.value = value;
  } else {
    input = el("input", { ...attrs, type: definition.type === "PASSWORD" ? "password" : "text", autocomplete: definition.type === "PASSWORD" ? "new-password" : "off", readonly: key === "name" && existing ? true : undefined });
  }
  input.addEventListener("input", () => {
    if (input.value === "") delete state.values[key]; else state.values[key] = input.value;
    changed(key);
  });
  const error = el("p", { class: "field-error", id: `error-${key}`, "data-for": key, role: "alert" });
  state.fields.set(key, { input, error });
  return el("div", { class: "field", "data-field": key },
    el("label", { for: attrs.id }, definition.display_name || key, definition.required ? el("span", { class: "required", title: "required" }, " *") : null, el("span", { class: "type" }, ` ${(definition.type || "").toLowerCase()}`)),
    input,
    definition.type === "PASSWORD" ? el("p", { class: "hint" }, "Password: enter a ${provider:...} reference, not the secret itself.") : null,
    definition.documentation ? el("p", { class: "doc" }, definition.documentation) : null,
    error);
}

async function validate(context, state, ui) {
  if (!state.plugin || state.stopped) return null;
  try {
    const result = await call("PUT", `/connector-plugins/${encode(state.plugin)}/config/validate`, { body: { ...state.values, "connector.class": state.plugin } });
    showErrors(state, ui, result);
    return result;
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) {
      ui.message.className = "muted";
      ui.message.textContent = "Live validation needs the admin role on every connector; the worker still checks the configuration when you save.";
      return null;
    }
    report(context, ui, error);
    return null;
  }
}

function showErrors(state, ui, result) {
  let shown = 0;
  for (const { value } of result.configs) {
    const slot = state.fields.get(value.name);
    const errors = [...(value.errors || [])];
    if (state.values[value.name] === MASKED) errors.push(`Masked by the API: enter the value again, as a \${provider:...} reference.`);
    const visible = (state.submitted || state.touched.has(value.name)) && errors.length > 0;
    if (!slot) continue;
    slot.error.textContent = visible ? errors.join(" ") : "";
    slot.input.classList.toggle("invalid", visible);
    if (visible) shown += 1;
  }
  state.errorCount = result.error_count;
  return shown;
}

async function save(context, state, ui, existing) {
  state.submitted = true;
  const name = existing || (state.values.name || "").trim();
  if (!state.plugin) { ui.message.className = "error"; ui.message.textContent = "Choose a plugin first."; return; }
  const result = await validate(context, state, ui);
  const masked = Object.values(state.values).includes(MASKED);
  if ((result && result.error_count > 0) || masked || !name) {
    ui.message.className = "error";
    ui.message.textContent = !name ? "Give the connector a name." : `Fix the errors marked on the fields (${result ? result.error_count : 0}).`;
    const first = [...state.fields.values()].find((slot) => slot.error.textContent);
    if (first) first.input.scrollIntoView({ block: "center" });
    return;
  }
  try {
    await call("PUT", `/connectors/${encode(name)}/config`, { body: { ...state.values, name, "connector.class": state.plugin } });
    location.hash = `#/connectors/${encode(name)}`;
  } catch (error) {
    report(context, ui, error);
  }
}

function report(context, ui, error) {
  if (error instanceof Unauthorized) { context.expired(); return; }
  ui.message.className = "error";
  ui.message.textContent = error.message;
}

function parseJson(text) {
  let parsed;
  try { parsed = JSON.parse(text); } catch (error) { return `Not valid JSON: ${error.message}`; }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) return "The configuration is a JSON object of keys and values.";
  const values = {};
  for (const [key, value] of Object.entries(parsed)) {
    if (value !== null && typeof value === "object") return `The value of ${key} must be a string, number or boolean.`;
    if (value !== null && value !== "") values[key] = String(value);
  }
  return values;
}

function toJson(values) {
  return JSON.stringify(values, null, 2);
}

function shortName(cls) {
  return cls.split(".").pop();
}
