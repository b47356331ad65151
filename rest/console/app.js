// The console's entry point: sign-in, the page header and hash routing to the pages.

import { ApiError, Identity, Unauthorized, basicCredential, bearerCredential, call, forgetCredential, hasCredential, saveCredential } from "./api.js";
import { el, replace } from "./dom.js";
import { History } from "./metrics.js";
import { renderOverview } from "./overview.js";
import { renderConnector } from "./connector.js";
import { renderEditor } from "./editor.js";
import { renderDlq } from "./dlq.js";
import { renderTap } from "./tap.js";
import { renderBackfills } from "./backfills.js";

const view = document.getElementById("view");
const context = { identity: null, history: new History(), signIn: showSignIn };
let leave = null; // stops the current page's polling

async function boot() {
  try {
    context.identity = new Identity(await call("GET", "/auth/whoami"));
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(hasCredential() ? "Those credentials were refused." : "");
    if (error instanceof ApiError && error.status === 403) {
      return showSignIn(`Signed in, but ${error.message.replace(/^Forbidden: /, "")}.`);
    }
    replace(view, el("p", { class: "error" }, `The worker did not answer: ${error.message}`));
    return;
  }
  showHeader();
  route();
}

function showHeader() {
  const identity = context.identity;
  document.getElementById("whoami").textContent = identity.authenticated
    ? `${identity.principal} · ${identity.grants.map((g) => `${g.role} on ${g.pattern}`).join(", ") || "no role"}`
    : "authentication off";
  document.getElementById("signout").hidden = !identity.authenticated;
  document.getElementById("nav-new").hidden = !identity.can("admin");
  // GET /backfills needs the viewer role worker-wide (backfills belong to no connector).
  document.getElementById("nav-backfills").hidden = !identity.can("view");
}

function route() {
  if (leave) leave();
  leave = null;
  if (!context.identity) return;
  const hash = location.hash.replace(/^#/, "") || "/";
  const parts = hash.split("/").filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("current", a.getAttribute("href") === `#${hash}`));
  if (parts[0] === "connectors" && parts[1] && parts[2] === "edit") leave = renderEditor(view, context, parts[1]);
  else if (parts[0] === "connectors" && parts[1] && parts[2] === "dlq") leave = renderDlq(view, context, parts[1]);
  else if (parts[0] === "connectors" && parts[1] && parts[2] === "tap") leave = renderTap(view, context, parts[1]);
  else if (parts[0] === "connectors" && parts[1]) leave = renderConnector(view, context, parts[1]);
  else if (parts[0] === "new") leave = renderEditor(view, context, null);
  else if (parts[0] === "backfills") leave = renderBackfills(view, context);
  else leave = renderOverview(view, context);
}

function showSignIn(message = "") {
  if (leave) leave();
  leave = null;
  context.identity = null;
  document.getElementById("signout").hidden = true;
  document.getElementById("nav-new").hidden = true;
  document.getElementById("nav-backfills").hidden = true;
  document.getElementById("whoami").textContent = "";
  const kind = el("select", { id: "signin-kind", name: "kind" }, el("option", { value: "basic" }, "User and password"), el("option", { value: "bearer" }, "Bearer token"));
  const user = el("input", { id: "signin-user", name: "user", autocomplete: "username" });
  const password = el("input", { id: "signin-password", name: "password", type: "password", autocomplete: "current-password" });
  const token = el("input", { id: "signin-token", name: "token", type: "password", autocomplete: "off" });
  const basicRows = [el("label", {}, "User", user), el("label", {}, "Password", password)];
  const tokenRow = el("label", { hidden: true }, "Token", token);
  kind.addEventListener("change", () => {
    basicRows.forEach((row) => { row.hidden = kind.value !== "basic"; });
    tokenRow.hidden = kind.value !== "bearer";
  });
  const form = el("form", { id: "signin", class: "card narrow" },
    el("h2", {}, "Sign in"),
    el("p", { class: "muted" }, "This worker's REST API needs credentials; the console sends them with every call it makes."),
    el("label", {}, "Method", kind), basicRows, tokenRow,
    el("p", { id: "signin-error", class: "error", role: "alert" }, message),
    el("button", { id: "signin-submit", type: "submit" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    saveCredential(kind.value === "basic" ? basicCredential(user.value, password.value) : bearerCredential(token.value));
    boot();
  });
  replace(view, form);
  (kind.value === "basic" ? user : token).focus();
}

/** Called by pages when the API answers 401 in the middle of a session. */
export function sessionExpired() {
  showSignIn("The worker asked for credentials again.");
}

document.getElementById("signout").addEventListener("click", () => {
  forgetCredential();
  showSignIn("Signed out.");
});
window.addEventListener("hashchange", route);
context.expired = sessionExpired;
boot();
