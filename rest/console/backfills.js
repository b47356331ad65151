// Backfills page (#/backfills): the jobs of GET /backfills with state, progress, rate and ETA, the
// recorded hand-off position of a JDBC/CDC read, each job's spec as GET /backfills/{id} gives it
// (secrets masked by the worker), Run now (POST /backfills/{id}/run), cancel (DELETE
// /backfills/{id}: the run stops, the job stays) and remove (?forget=true), and the "New backfill"
// form (backfill_form.js).

import { ApiError, Unauthorized, call, encode } from "./api.js";
import { backfillForm } from "./backfill_form.js";
import { badge, confirmAction, el, figure, replace } from "./dom.js";
import { POLL_MS } from "./overview.js";

const ACTIVE = new Set(["PENDING", "RUNNING"]);

export function renderBackfills(view, context) {
  const parts = {
    rows: el("tbody"),
    message: el("p", { id: "backfills-message", role: "status" }),
  };
  const samples = new Map(); // job id → {run, rows, at}: the previous poll, for the rate between polls
  const specViews = new Map(); // job id → its <details> spec view, kept across polls (open or not, loaded)
  const section = el("section", { id: "backfills-page" },
    el("h1", {}, "Backfills"),
    el("p", { class: "muted" }, "Bulk loads and reprocessing runs on Spark. Rate and ETA come from the change between two polls (every 2 s), else from the worker's own figures."),
    parts.message,
    el("table", { id: "backfills" }, el("thead", {}, el("tr", {},
      ["Job", "Kind", "State", "Progress", "Rows", "Rate", "ETA", "Hand-off position", ""].map((h) => el("th", {}, h)))), parts.rows));
  const form = context.identity.can("admin") ? backfillForm(context, () => refresh()) : null;
  if (form) section.append(form.node);
  replace(view, section);
  let stopped = false;

  async function refresh() {
    try {
      const jobs = await call("GET", "/backfills");
      if (stopped) return;
      const now = Date.now();
      for (const id of [...specViews.keys()]) if (!jobs.some((job) => job.id === id)) specViews.delete(id);
      const rows = jobs.map((job) => jobRow(context, job, rateOf(samples, job, now), () => refresh(), parts.message, specView(context, specViews, job.id)));
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
  return () => { stopped = true; clearInterval(timer); if (form) form.stop(); };
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
  else if (!ACTIVE.has(status.state)) eta = null; // failed or cancelled: nothing is left to wait for
  return { rate, eta };
}

function jobRow(context, job, figures, refresh, message, spec) {
  const status = job.status || {};
  const percent = status.percent ?? (status.state === "SUCCEEDED" ? 100 : null);
  const progress = el("progress", { class: "backfill-progress", max: 100, value: percent ?? 0, "data-percent": percent ?? "" });
  if (percent === null) progress.removeAttribute("value"); // indeterminate: no total known yet
  return el("tr", { "data-job": job.id, "data-state": status.state || "" },
    el("td", {}, job.id, job.schedule ? el("div", { class: "muted" }, `cron ${job.schedule.cron}${job.next_run ? `, next ${job.next_run}` : ""}`) : null, spec),
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

/** The job's spec as GET /backfills/{id} returns it (secrets masked), read each time it is opened. */
function specView(context, views, id) {
  if (views.has(id)) return views.get(id);
  const body = el("pre", { class: "backfill-spec-json" });
  // Wrapped and narrow, so an open spec does not push the row's buttons off the table (CSSOM: the
  // page's style-src policy allows it, where it would refuse a style attribute).
  Object.assign(body.style, { width: "24rem", whiteSpace: "pre-wrap", overflowWrap: "anywhere" });
  const details = el("details", { class: "backfill-spec-view", "data-job": id }, el("summary", {}, "Spec"), body);
  details.addEventListener("toggle", async () => {
    if (!details.open) return;
    body.textContent = "Loading…";
    try {
      const info = await call("GET", `/backfills/${encode(id)}`);
      body.textContent = JSON.stringify(info.spec, null, 2);
    } catch (error) {
      if (error instanceof Unauthorized) { context.expired(); return; }
      body.textContent = `Cannot read the spec: ${error.message}`;
    }
  });
  views.set(id, details);
  return details;
}

function actions(context, job, status, refresh, message) {
  if (!context.identity.can("admin")) return null;
  const act = (label, method, path, question) => async () => {
    if (question && !(await confirmAction(question))) return;
    try {
      const info = await call(method, path);
      message.className = "ok";
      message.textContent = `${label} ${job.id}: ${info && info.status && info.status.run_id && method === "POST" ? `run ${info.status.run_id} started` : "done"}.`;
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
      ? el("button", { class: "btn-backfill-cancel", type: "button", onclick: act("Cancel", "DELETE", base, `Cancel the running backfill ${job.id}? Its Spark jobs are cancelled and its state becomes CANCELLED; the job and its schedule stay.`) }, "Cancel")
      : el("button", { class: "btn-backfill-run", type: "button", title: "Run the stored spec again now (its schedule stays)", onclick: act("Run now", "POST", `${base}/run`, null) }, "Run now"),
    el("button", { class: "btn-backfill-remove danger", type: "button", onclick: act("Remove", "DELETE", `${base}?forget=true`, `Remove backfill ${job.id}? A running run is cancelled, and the job and its schedule are forgotten.`) }, "Remove"));
}
