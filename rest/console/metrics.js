// Reads the worker's /metrics (Prometheus text) into per-connector figures, and keeps the
// history the sparklines draw. Names are those of worker/observability/metrics.py.

const IN_TOTALS = ["kafka_connect_source_task_metrics_source_record_poll_total", "kafka_connect_sink_task_metrics_sink_record_read_total"];
const OUT_TOTALS = ["kafka_connect_source_task_metrics_source_record_write_total", "kafka_connect_sink_task_metrics_sink_record_send_total"];
const ERRORS = "kafka_connect_task_error_metrics_total_record_errors";
const LAG = "kafka_consumer_consumer_fetch_manager_metrics_records_lag";
const WANTED = new Set([...IN_TOTALS, ...OUT_TOTALS, ERRORS, LAG]);

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

/** Rates between scrapes and the last minutes of them, per connector; lives as long as the page. */
export class History {
  constructor(keep = 90) {
    this.keep = keep;
    this.last = new Map(); // connector → {at, in, out}
    this.series = new Map(); // connector → {in: [], out: [], rateIn, rateOut}
  }

  add(figures, at = performance.now()) {
    for (const [connector, f] of figures) {
      const previous = this.last.get(connector);
      const entry = this.series.get(connector) || { in: [], out: [], rateIn: null, rateOut: null };
      if (previous && at > previous.at) {
        const seconds = (at - previous.at) / 1000;
        // A restarted task starts its counters again: never show a negative rate.
        entry.rateIn = Math.max(0, f.in - previous.in) / seconds;
        entry.rateOut = Math.max(0, f.out - previous.out) / seconds;
        entry.in.push(entry.rateIn);
        entry.out.push(entry.rateOut);
        if (entry.in.length > this.keep) { entry.in.shift(); entry.out.shift(); }
      }
      this.series.set(connector, entry);
      this.last.set(connector, { at, in: f.in, out: f.out });
    }
  }

  of(connector) {
    return this.series.get(connector) || { in: [], out: [], rateIn: null, rateOut: null };
  }
}
