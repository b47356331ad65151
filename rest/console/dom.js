// Small DOM helpers. Every value from the API goes in as text (textContent or an attribute),
// never as markup, so a connector name or an error trace cannot inject anything into the page.

/** An element: el("td", {class: "state", "data-x": 1}, "text", childNode, [more children]). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "value") node.value = value;
    else if (key === "checked") node.checked = Boolean(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of ``node``. */
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A state badge: RUNNING, FAILED, PAUSED, ... */
export function badge(state) {
  const text = state || "UNKNOWN";
  return el("span", { class: `badge state-${text.toLowerCase()}` }, text);
}

/** A number for a table cell: "—" when unknown, one decimal under 10, thousands separated. */
export function figure(value) {
  if (value === undefined || value === null || Number.isNaN(value)) return "—";
  if (Math.abs(value) < 10 && !Number.isInteger(value)) return value.toFixed(1);
  return Math.round(value).toLocaleString("en");
}

/** Asks in the page's own dialog (never window.confirm); resolves to true on "Confirm". */
export function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

/** ``text`` parsed as JSON, or ``undefined`` after the parse error is shown in ``message`` (an element). */
export function parseJson(text, message) {
  try {
    return JSON.parse(text);
  } catch (error) {
    message.className = "error";
    message.textContent = `Not JSON: ${error.message}`;
    return undefined;
  }
}
