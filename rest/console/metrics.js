// Reads every worker's metrics (GET /cluster/metrics: the text of each worker's /metrics, only the
// families below) into per-connector figures summed over the workers, and keeps the history the
// charts draw. Names are those of worker/observability/metrics.py.

import { call } from "./api.js";

const IN_TOTALS = ["kafka_connect_source_task_metrics_source_record_poll_total", "kafka_connect_sink_task_metrics_sink_record_read_total"];
const OUT_TOTALS = ["kafka_connect_source_task_metrics_source_record_write_total", "kafka_connect_sink_task_metrics_sink_record_send_total"];
const ERRORS = "kafka_connect_task_error_metrics_total_record_errors";
const LAG = "kafka_consumer_consumer_fetch_manager_metrics_records_lag";
const WANTED = new Set([...IN_TOTALS, ...OUT_TOTALS, ERRORS, LAG]);
const QUERY = [...WANTED].map((name) => `name=${encodeURIComponent(name)}`).join("&");

/** The spans a chart can show: the last minutes at every poll, or the last hour in 30 s steps. */
export const SPANS = {
  "5m": { label: "5 min", seconds: 300 },
  "1h": { label: "1 h", seconds: 3600 },
};
const FINE_KEEP = 150; // polls: 5 min at 2 s
const COARSE_STEP_MS = 30_000;
const COARSE_KEEP = 120; // 1 h of 30 s steps

/** Figures of every worker: {figures: connector → {in, out, errors, lag, hasLag}, unreachable: [worker ids]}. */
export async function fetchFigures() {
  const answer = await call("GET", `/cluster/metrics?${QUERY}`);
  const samples = [];
  const unreachable = [];
  for (const worker of answer.workers) {
    if (typeof worker.metrics === "string") samples.push(...parseExposition(worker.metrics));
    else unreachable.push(worker.id);
  }
  return { figures: perConnector(samples), unreachable };
}

/** Samples of the metrics the console uses: [{name, labels, value}]. */
export function parseExposition(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf(" ");
    const name = brace >= 0 && brace < space ? line.slice(0, brace) : line.slice(0, line.indexOf(" "));
    if (!WANTED.has(name)) continue;
    const labels = {};
    if (brace >= 0) {
      const body = line.slice(brace + 1, line.lastIndexOf("}"));
      for (const match of body.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[match[1]] = match[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name, labels, value: Number(line.slice(space + 1)) });
  }
  return samples;
}

/** connector → {in, out, errors, lag} totals over its tasks. */
export function perConnector(samples) {
  const figures = new Map();
  for (const { name, labels, value } of samples) {
    if (!labels.connector || !Number.isFinite(value)) continue;
    const entry = figures.get(labels.connector) || { in: 0, out: 0, errors: 0, lag: 0, hasLag: false };
    if (IN_TOTALS.includes(name)) entry.in += value;
    else if (OUT_TOTALS.includes(name)) entry.out += value;
    else if (name === ERRORS) entry.errors += value;
    else if (name === LAG) { entry.lag += value; entry.hasLag = true; }
    figures.set(labels.connector, entry);
  }
  return figures;
}

/** Rates between polls and lag, per connector, at two resolutions: every poll of the last minutes,
 * and 30 s averages of the last hour. Lives as long as the tab (kept across the console's pages). */
export class History {
  constructor() {
    this.last = new Map(); // connector → {at, in, out}
    this.series = new Map(); // connector → see entry()
  }

  add(figures, at = performance.now(), wall = Date.now()) {
    for (const [connector, f] of figures) {
      const previous = this.last.get(connector);
      const entry = this.series.get(connector) || newEntry();
      entry.lagNow = f.hasLag ? f.lag : null;
      if (previous && at > previous.at) {
        const seconds = (at - previous.at) / 1000;
        // A restarted task starts its counters again: never show a negative rate.
        entry.rateIn = Math.max(0, f.in - previous.in) / seconds;
        entry.rateOut = Math.max(0, f.out - previous.out) / seconds;
        push(entry.fine, { at: wall, in: entry.rateIn, out: entry.rateOut, lag: entry.lagNow }, FINE_KEEP);
        fold(entry, wall);
      }
      this.series.set(connector, entry);
      this.last.set(connector, { at, in: f.in, out: f.out });
    }
  }

  /** {in, out, lag (the last minutes, one value per poll), rateIn, rateOut, lagNow}. */
  of(connector) {
    const entry = this.series.get(connector) || newEntry();
    return { in: entry.fine.map((p) => p.in), out: entry.fine.map((p) => p.out), lag: entry.fine.map((p) => p.lag), rateIn: entry.rateIn, rateOut: entry.rateOut, lagNow: entry.lagNow };
  }

  /** Points {at (ms since the epoch), in, out, lag} of ``span`` ("5m" or "1h"), oldest first. */
  points(connector, span) {
    const entry = this.series.get(connector);
    if (!entry) return [];
    if (span === "5m") return entry.fine.slice();
    const open = entry.bucket ? [average(entry.bucket)] : [];
    return entry.coarse.concat(open);
  }
}

function newEntry() {
  return { fine: [], coarse: [], bucket: null, rateIn: null, rateOut: null, lagNow: null };
}

function push(list, value, keep) {
  list.push(value);
  if (list.length > keep) list.shift();
}

/** Adds the newest poll to the open 30 s bucket; a bucket that is over becomes one coarse point. */
function fold(entry, wall) {
  const point = entry.fine[entry.fine.length - 1];
  const start = Math.floor(wall / COARSE_STEP_MS) * COARSE_STEP_MS;
  if (entry.bucket && entry.bucket.start !== start) {
    push(entry.coarse, average(entry.bucket), COARSE_KEEP);
    entry.bucket = null;
  }
  entry.bucket = entry.bucket || { start, points: [] };
  entry.bucket.points.push(point);
}

function average(bucket) {
  const mean = (key) => {
    const values = bucket.points.map((p) => p[key]).filter((v) => v !== null && Number.isFinite(v));
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
  };
  return { at: bucket.start + COARSE_STEP_MS / 2, in: mean("in"), out: mean("out"), lag: mean("lag") };
}
