// The REST API as the console calls it: same origin, the user's credential in an Authorization
// header, and the browser's own credentials (a TLS client certificate, for a worker that
// authenticates by certificate). The credential lives in sessionStorage (gone with the tab).
//
// Every call carries "X-Sluice-Console: 1": the worker then answers a 401 without its Basic
// challenge, which on a call with browser credentials would make the browser pop its native
// sign-in dialog over the console's own form.

const STORE_KEY = "sluice.console.authorization";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function basicCredential(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return "Basic " + btoa(String.fromCharCode(...bytes));
}

export function bearerCredential(token) {
  return "Bearer " + token.trim();
}

export function saveCredential(header) {
  sessionStorage.setItem(STORE_KEY, header);
}

export function forgetCredential() {
  sessionStorage.removeItem(STORE_KEY);
}

export function hasCredential() {
  return sessionStorage.getItem(STORE_KEY) !== null;
}

/** ``fetch`` on the API: JSON (or text with ``{text: true}``) on 2xx; Unauthorized on 401; ApiError otherwise. */
export async function call(method, path, { body, text = false } = {}) {
  const headers = { Accept: text ? "text/plain" : "application/json", "X-Sluice-Console": "1" };
  const credential = sessionStorage.getItem(STORE_KEY);
  if (credential) headers.Authorization = credential;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  if (response.status === 401) throw new Unauthorized(await messageOf(response));
  if (!response.ok) {
    const parsed = await response.json().catch(() => null);
    const message = parsed && parsed.message ? parsed.message : `HTTP ${response.status}`;
    throw new ApiError(response.status, message, parsed);
  }
  if (response.status === 204) return null;
  if (text) return response.text();
  const content = await response.text();
  return content ? JSON.parse(content) : null;
}

async function messageOf(response) {
  const parsed = await response.json().catch(() => null);
  return parsed && parsed.message ? parsed.message : "Authentication required";
}

export const encode = encodeURIComponent;

/** What the caller may do, from GET /auth/whoami; the server still checks every request. */
export class Identity {
  constructor(whoami) {
    this.principal = whoami.principal;
    this.authenticated = whoami.authenticated;
    this.grants = whoami.grants || [];
    this.patterns = this.grants.map((g) => [globRegExp(g.pattern), g]);
  }

  /** Whether a grant gives ``permission`` ("view", "operate", "admin") on ``connector`` (null: worker-wide). */
  can(permission, connector = null) {
    return this.patterns.some(([regexp, grant]) => grant.permissions.includes(permission)
      && (connector === null ? grant.pattern === "*" : regexp.test(connector)));
  }

  /** Whether any grant gives ``permission`` on some connector. */
  canAnywhere(permission) {
    return this.grants.some((grant) => grant.permissions.includes(permission));
  }
}

/** A connector-name pattern as the worker matches it (shell globs: *, ?, [abc], [!abc]). */
export function globRegExp(pattern) {
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*") out += ".*";
    else if (c === "?") out += ".";
    else if (c === "[" && pattern.indexOf("]", i + 2) > i) {
      const end = pattern.indexOf("]", i + 2);
      let body = pattern.slice(i + 1, end);
      if (body.startsWith("!")) body = "^" + body.slice(1);
      out += "[" + body.replace(/\\/g, "\\\\") + "]";
      i = end;
    } else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${out}$`, "s");
}
