// A sparkline: one SVG polyline over the last values, scaled to their maximum.

const SVG = "http://www.w3.org/2000/svg";

export function sparkline(values, { width = 120, height = 24, label = "" } = {}) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const points = values.filter((v) => Number.isFinite(v));
  if (points.length < 2) return svg;
  const max = Math.max(...points, 1e-9);
  const step = width / (points.length - 1);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (v / max) * (height - 2)).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}
