// A sparkline: one SVG polyline over the last values, scaled to their maximum.

const SVG = "http://www.w3.org/2000/svg";

/** An empty SVG image of ``width`` × ``height`` with its class and accessible label. */
function svgImage(width, height, cls, label) {
  const svg = document.createElementNS(SVG, "svg");
  for (const [key, value] of Object.entries({ viewBox: `0 0 ${width} ${height}`, width, height, class: cls, role: "img", "aria-label": label })) {
    svg.setAttribute(key, value);
  }
  return svg;
}

export function sparkline(values, { width = 120, height = 24, label = "" } = {}) {
  const svg = svgImage(width, height, "spark", label);
  const points = values.filter((v) => Number.isFinite(v));
  if (points.length < 2) return svg;
  const max = Math.max(...points, 1e-9);
  const step = width / (points.length - 1);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (v / max) * (height - 2)).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}

/** A chart of ``points`` ({at, [key]: value}) over the last ``spanMs`` up to ``now`` (or from the
 * first point, when they cover less): one line per key of ``lines`` ({key: css class}), x by time,
 * y from 0 to the largest value (written at the top left), the time covered written below. Points
 * with no value leave a gap. */
export function chart(points, lines, { width = 480, height = 120, spanMs, now = Date.now(), label = "", unit = "" } = {}) {
  const svg = svgImage(width, height, "chart", label);
  const plot = { left: 4, top: 14, bottom: height - 16, right: width - 4 };
  // A worker's clock may run a little ahead of the browser's: the chart ends at its last point then.
  const end = points.length ? Math.max(now, points[points.length - 1].at) : now;
  const shown = points.filter((p) => p.at >= end - spanMs);
  const start = shown.length ? Math.min(Math.max(end - spanMs, shown[0].at), end - 1000) : end - spanMs;
  const values = shown.flatMap((p) => Object.keys(lines).map((k) => p[k])).filter((v) => v !== null && Number.isFinite(v));
  const max = Math.max(...values, 0);
  const x = (at) => plot.left + ((at - start) / (end - start)) * (plot.right - plot.left);
  const y = (v) => plot.bottom - (max > 0 ? v / max : 0) * (plot.bottom - plot.top);
  svg.append(line(plot.left, plot.bottom, plot.right, plot.bottom, "axis"));
  svg.append(text(plot.left, 10, `${formatMax(max)}${unit}`, "chart-max"));
  svg.append(text(plot.left, height - 3, `−${spanLabel(end - start)}`, "chart-from"));
  svg.append(text(plot.right, height - 3, "now", "chart-to", "end"));
  for (const [key, cls] of Object.entries(lines)) {
    for (const run of runs(shown, key)) {
      if (run.length < 2) continue;
      const polyline = document.createElementNS(SVG, "polyline");
      polyline.setAttribute("points", run.map((p) => `${x(p.at).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" "));
      polyline.setAttribute("class", cls);
      polyline.dataset.points = String(run.length);
      svg.append(polyline);
    }
  }
  svg.dataset.max = String(max);
  svg.dataset.points = String(shown.length);
  return svg;
}

/** Consecutive points that have a value of ``key``. */
function runs(points, key) {
  const out = [[]];
  for (const p of points) {
    if (p[key] === null || !Number.isFinite(p[key])) { if (out[out.length - 1].length) out.push([]); continue; }
    out[out.length - 1].push(p);
  }
  return out;
}

function line(x1, y1, x2, y2, cls) {
  const node = document.createElementNS(SVG, "line");
  for (const [k, v] of Object.entries({ x1, y1, x2, y2 })) node.setAttribute(k, v);
  node.setAttribute("class", cls);
  return node;
}

function text(x, y, content, cls, anchor = "start") {
  const node = document.createElementNS(SVG, "text");
  node.setAttribute("x", x);
  node.setAttribute("y", y);
  node.setAttribute("class", cls);
  node.setAttribute("text-anchor", anchor);
  node.textContent = content;
  return node;
}

function formatMax(value) {
  if (value >= 1e6) return `${(value / 1e6).toFixed(1)}M`;
  if (value >= 1e4) return `${(value / 1e3).toFixed(0)}k`;
  return value >= 10 || Number.isInteger(value) ? String(Math.round(value)) : value.toFixed(1);
}

function spanLabel(ms) {
  const seconds = Math.round(ms / 1000);
  if (seconds < 120) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  return minutes >= 60 ? `${(minutes / 60).toFixed(minutes % 60 ? 1 : 0)} h` : `${minutes} min`;
}
