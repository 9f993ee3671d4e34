// Small time-series charts drawn as inline SVG: a line with a shaded area, a grid line at
// the top value, and gaps where a sample has no value (no request finished its first token).

const SVG = "http://www.w3.org/2000/svg";
const PAD = { left: 44, right: 8, top: 10, bottom: 20 };

function svgElement(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function label(x, y, text, anchor) {
  const node = svgElement("text", { x, y, "text-anchor": anchor, class: "axis" });
  node.textContent = text;
  return node;
}

/** A span of time as the axis says it: seconds under two minutes, else minutes. */
function ago(ms) {
  return ms < 120000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60000)} min`;
}

/** The largest of 1, 2, 2.5, 5 × 10^k at or above `value`: a readable top for the axis. */
function niceCeiling(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 2.5, 5, 10].find((s) => s * power >= value);
  return step * power;
}

/**
 * Draw `samples` ([{t, value}], t in ms, value a number or null) of the last `windowMs`
 * into `svg` (its viewBox sets the size), values formatted by `format`.
 */
export function drawChart(svg, samples, { windowMs, now, format }) {
  const [, , width, height] = svg.getAttribute("viewBox").split(" ").map(Number);
  const plotWidth = width - PAD.left - PAD.right;
  const plotHeight = height - PAD.top - PAD.bottom;
  const visible = samples.filter((s) => now - s.t <= windowMs);
  const peak = Math.max(0, ...visible.map((s) => s.value ?? 0));
  const top = niceCeiling(peak);
  svg.dataset.peak = String(peak); // what the chart shows at most, readable by tests
  const x = (t) => PAD.left + plotWidth * (1 - (now - t) / windowMs);
  const y = (v) => PAD.top + plotHeight * (1 - v / top);

  const nodes = [
    svgElement("line", { x1: PAD.left, x2: width - PAD.right, y1: y(top), y2: y(top), class: "grid" }),
    svgElement("line", { x1: PAD.left, x2: width - PAD.right, y1: y(0), y2: y(0), class: "baseline" }),
    label(PAD.left - 4, y(top) + 4, format(top), "end"),
    label(PAD.left - 4, y(0) + 4, "0", "end"),
    label(PAD.left, height - 4, `−${ago(windowMs)}`, "start"),
    label(width - PAD.right, height - 4, "now", "end"),
  ];
  // Runs of consecutive samples with a value, each drawn as its own line and area.
  let run = [];
  const runs = [run];
  for (const sample of visible) {
    if (sample.value === null || sample.value === undefined) {
      if (run.length) runs.push((run = []));
    } else {
      run.push(`${x(sample.t).toFixed(1)},${y(sample.value).toFixed(1)}`);
    }
  }
  for (const points of runs.filter((r) => r.length)) {
    const first = points[0].split(",")[0];
    const last = points[points.length - 1].split(",")[0];
    const area = `${first},${y(0)} ${points.join(" ")} ${last},${y(0)}`;
    nodes.push(svgElement("polygon", { points: area, class: "area" }));
    nodes.push(svgElement("polyline", { points: points.join(" "), class: "line" }));
  }
  const latest = visible.length ? visible[visible.length - 1].value : null;
  if (latest !== null && latest !== undefined) {
    nodes.push(label(width - PAD.right, PAD.top + 2, `now ${format(latest)}`, "end"));
  }
  svg.replaceChildren(...nodes);
}
