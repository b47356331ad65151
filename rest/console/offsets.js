// The connector page's offsets: shown always; edited (PATCH) or reset (DELETE) while the connector
// is STOPPED, as KIP-875 allows, by a caller with the operator role on it. The server's message is
// shown as it answers.

import { Unauthorized, call } from "./api.js";
import { confirmAction, el } from "./dom.js";

/** The offsets panel; ``update(state, offsets)`` is called on every refresh of the page. */
export function offsetsPanel(context, name, base, refresh) {
  const view = el("pre", { id: "offsets" });
  const editor = el("textarea", { id: "offsets-editor", rows: 10, spellcheck: "false", hidden: true });
  const message = el("p", { id: "offsets-message", role: "status" });
  const note = el("p", { id: "offsets-note", class: "muted" });
  const save = el("button", { id: "btn-offsets-save", type: "button", hidden: true }, "Save offsets");
  const reset = el("button", { id: "btn-offsets-reset", type: "button", class: "danger", hidden: true }, "Reset offsets");
  const mayEdit = context.identity.can("operate", name);
  let dirty = false; // the user typed: polls stop replacing the editor's text until it is saved
  let latest = null;
  editor.addEventListener("input", () => { dirty = true; });

  async function send(label, method, body) {
    try {
      const answer = await call(method, `${base}/offsets`, body === undefined ? {} : { body });
      message.className = "ok";
      message.textContent = `${label}: ${(answer && answer.message) || "done"}`;
      dirty = false; // the next refresh loads what the worker now holds
      refresh();
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      message.className = "error";
      message.textContent = `${label} failed: ${error.message}`;
    }
  }

  save.addEventListener("click", () => {
    let body;
    try {
      body = JSON.parse(editor.value);
    } catch (error) {
      message.className = "error";
      message.textContent = `Not JSON: ${error.message}`;
      return;
    }
    send("Offsets saved", "PATCH", Array.isArray(body) ? { offsets: body } : body);
  });
  reset.addEventListener("click", async () => {
    if (await confirmAction(`Reset every offset of ${name}? When it is resumed, it starts as a new connector would.`)) send("Offsets reset", "DELETE");
  });

  function update(state, offsets) {
    latest = typeof offsets === "string" ? offsets : { offsets: offsets.offsets || [] };
    view.textContent = typeof latest === "string" ? latest : JSON.stringify(latest.offsets, null, 2);
    const editable = mayEdit && state === "STOPPED" && typeof latest !== "string";
    editor.hidden = save.hidden = reset.hidden = !editable;
    view.hidden = editable;
    const text = typeof latest === "string" ? "" : JSON.stringify(latest, null, 2);
    if (!editable) dirty = false;
    else if (!dirty && editor.value !== text) editor.value = text;
    note.textContent = !mayEdit ? "" : editable
      ? "Edit the JSON and save (PATCH): an entry with offset null resets that partition."
      : "Stop the connector to edit or reset its offsets.";
  }

  const node = el("div", { id: "offsets-panel" }, note, view, editor, el("div", { class: "toolbar" }, save, reset), message);
  return { node, update };
}

