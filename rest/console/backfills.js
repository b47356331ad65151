// Backfills page (#/backfills): the jobs of GET /backfills with state, progress, rate and ETA, the
// recorded hand-off position of a JDBC/CDC read, cancel (DELETE /backfills/{id}: the run stops,
// the job stays) and remove (?forget=true), and a job created from a JSON spec (POST /backfills,
// whose 400 names the bad key).

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { badge, confirmAction, el, figure, replace } from "./dom.js";
import { POLL_MS } from "./overview.js";

const ACTIVE = new Set(["PENDING", "RUNNING"]);

const EXAMPLE = {
  id: "customers",
  kind: "jdbc_to_topic",
  source: { "connection.url": "jdbc:postgresql://db:5432/shop", "connection.user": "postgres", "connection.password": "${env:DB_PASSWORD}", table: "customers" },
  target: { topic: "shop.customers" },
};

export function renderBackfills(view, context) {
  const parts = {
    rows: el("tbody"),
    message: el("p", { id: "backfills-message", role: "status" }),
  };
  const samples = new Map(); // job id → {run, rows, at}: the previous poll, for the rate between polls
  const section = el("section", { id: "backfills-page" },
    el("h1", {}, "Backfills"),
    el("p", { class: "muted" }, "Bulk loads and reprocessing runs on Spark. Rate and ETA come from the change between two polls (every 2 s), else from the worker's own figures."),
    parts.message,
    el("table", { id: "backfills" }, el("thead", {}, el("tr", {},
      ["Job", "Kind", "State", "Progress", "Rows", "Rate", "ETA", "Hand-off position", ""].map((h) => el("th", {}, h)))), parts.rows));
  if (context.identity.can("admin")) section.append(createForm(context, () => refresh()));
  replace(view, section);
  let stopped = false;

  async function refresh() {
    try {
      const jobs = await call("GET", "/backfills");
      if (stopped) return;
      const now = Date.now();
      const rows = jobs.map((job) => jobRow(context, job, rateOf(samples, job, now), () => refresh(), parts.message));
      replace(parts.rows, rows.length ? rows : el("tr", {}, el("td", { colspan: 9, class: "muted" }, "No backfill jobs.")));
    } catch (error) {
      if (error instanceof Unauthorized) { stopped = true; context.expired(); return; }
      if (stopped) return;
      parts.message.className = "error";
      parts.message.textContent = error instanceof ApiError && error.status === 404
        ? "This worker runs no backfills (it has no backfill manager)."
        : error instanceof ApiError && error.status === 403
          ? "Backfills need the viewer role on every connector (*): they belong to no single connector."
          : `Refresh failed: ${error.message}`;
    }
  }

  refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => { stopped = true; clearInterval(timer); };
}

/** Rows per second between this poll and the previous one of the same run, or the worker's figure. */
function rateOf(samples, job, now) {
  const status = job.status || {};
  const rows = Number(status.rows_done || 0);
  const previous = samples.get(job.id);
  samples.set(job.id, { run: status.run_id, rows, at: now, rate: previous && previous.run === status.run_id ? previous.rate : null });
  let rate = null;
  if (ACTIVE.has(status.state) && previous && previous.run === status.run_id && now > previous.at) {
    const measured = (rows - previous.rows) / ((now - previous.at) / 1000);
    rate = measured > 0 ? measured : previous.rate;
    samples.get(job.id).rate = rate;
  }
  if (rate === null || rate === undefined) rate = status.rows_per_s ?? null;
  const total = status.rows_total;
  let eta = status.eta_s ?? null;
  if (ACTIVE.has(status.state) && rate && total) eta = Math.max(0, (total - rows) / rate);
  if (status.state === "SUCCEEDED") eta = 0;
  return { rate, eta };
}

function jobRow(context, job, figures, refresh, message) {
  const status = job.status || {};
  const percent = status.percent ?? (status.state === "SUCCEEDED" ? 100 : null);
  const progress = el("progress", { class: "backfill-progress", max: 100, value: percent ?? 0, "data-percent": percent ?? "" });
  if (percent === null) progress.removeAttribute("value"); // indeterminate: no total known yet
  return el("tr", { "data-job": job.id, "data-state": status.state || "" },
    el("td", {}, job.id, job.schedule ? el("div", { class: "muted" }, `cron ${job.schedule.cron}${job.next_run ? `, next ${job.next_run}` : ""}`) : null),
    el("td", {}, job.kind || ""),
    el("td", { class: "state" }, badge(status.state), status.error ? el("div", { class: "error backfill-error" }, status.error) : null),
    el("td", {}, progress, " ", el("span", { class: "backfill-percent" }, percent === null ? "—" : `${figure(percent)} %`)),
    el("td", { class: "num backfill-rows" }, `${figure(status.rows_done || 0)}${status.rows_total ? ` / ${figure(status.rows_total)}` : ""}`),
    el("td", { class: "num backfill-rate" }, figures.rate === null ? "—" : `${figure(figures.rate)} rows/s`),
    el("td", { class: "num backfill-eta" }, figures.eta === null ? "—" : duration(figures.eta)),
    el("td", { class: "backfill-handoff" }, handoff(status.source_position)),
    el("td", {}, actions(context, job, status, refresh, message)));
}

function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The recorded read position: a PostgreSQL LSN (and slot) with the CDC settings that continue from it. */
function handoff(position) {
  if (!position) return el("span", { class: "muted" }, "—");
  if (position.lsn === undefined) return el("code", {}, JSON.stringify(position));
  const slot = position.slot ? ` (slot ${position.slot}${position.slot_created ? ", created by this run" : ""})` : "";
  const cdc = Object.entries(position.cdc || {}).map(([key, value]) => `${key}=${value}`).join(" ");
  return el("div", {}, el("div", {}, "LSN ", el("code", { class: "backfill-lsn" }, position.lsn), slot),
    cdc ? el("div", { class: "muted" }, "CDC connector: ", el("code", {}, cdc)) : null);
}

function actions(context, job, status, refresh, message) {
  if (!context.identity.can("admin")) return null;
  const act = (label, path, question) => async () => {
    if (!(await confirmAction(question))) return;
    try {
      await call("DELETE", path);
      message.className = "ok";
      message.textContent = `${label} ${job.id}: done.`;
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      message.className = "error";
      message.textContent = `${label} ${job.id} failed: ${error.message}`;
    }
    refresh();
  };
  const base = `/backfills/${encode(job.id)}`;
  return el("span", { class: "toolbar" },
    ACTIVE.has(status.state)
      ? el("button", { class: "btn-backfill-cancel", type: "button", onclick: act("Cancel", base, `Cancel the running backfill ${job.id}? Its Spark jobs are cancelled and its state becomes CANCELLED; the job and its schedule stay.`) }, "Cancel")
      : null,
    el("button", { class: "btn-backfill-remove danger", type: "button", onclick: act("Remove", `${base}?forget=true`, `Remove backfill ${job.id}? A running run is cancelled, and the job and its schedule are forgotten.`) }, "Remove"));
}

function createForm(context, refresh) {
  const spec = el("textarea", { id: "backfill-spec", rows: 12, spellcheck: "false" });
  spec.value = JSON.stringify(EXAMPLE, null, 2);
  const message = el("p", { id: "backfill-create-message", role: "status" });
  const submit = el("button", { id: "btn-backfill-submit", type: "button" }, "Submit");
  submit.addEventListener("click", async () => {
    let body;
    try {
      body = JSON.parse(spec.value);
    } catch (error) {
      message.className = "error";
      message.textContent = `Not JSON: ${error.message}`;
      return;
    }
    try {
      const info = await call("POST", "/backfills", { body });
      message.className = "ok";
      message.textContent = `Backfill ${info.id} submitted (${(info.status || {}).state || "stored"}).${(info.warnings || []).map((w) => ` Warning: ${w}`).join("")}`;
      refresh();
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      message.className = "error";
      message.textContent = error.message; // the worker's validation names the bad key
    }
  });
  return el("div", { id: "backfill-create", class: "card" },
    el("h2", {}, "New backfill"),
    el("p", { class: "muted" }, "A job spec as POST /backfills takes it (see docs/backfill.md); give secrets as ${provider:...} references. It runs now, or on its schedule."),
    spec, el("div", { class: "toolbar" }, submit), message);
}
