// UI-7: the session's load over its request boundaries, as inline SVG built with DOM
// calls (no library): fatigue and wakefulness % above, input tokens below with the hard
// limit and soft threshold as lines; maintenance operations (compactions, prunes, …)
// as vertical marks where they ran; grey bands where a boundary is uncalibrated (a null
// value: no number is drawn or derived). One marker per point on the input line, one
// per known value on the % lines. Data: GET /api/sessions/{id}/context/series.

import { seriesOf } from "./api.js";
import { el } from "./chat.js";
import { grouped, texts } from "./texts.js";

const SVG = "http://www.w3.org/2000/svg";

/** The drawing's geometry (viewBox units). */
const WIDTH = 320;
const LEFT = 36;
const RIGHT = 8;
const PLOT = 80;
const GAP = 22;
const TOP = 14;
const PCT_TOP = TOP;
const TOKENS_TOP = TOP + PLOT + GAP;
const HEIGHT = TOKENS_TOP + PLOT + 8;

function svg(tag, attrs = {}, className) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
  if (className) {
    node.setAttribute("class", className);
  }
  return node;
}

function titled(node, text) {
  const title = svg("title");
  title.textContent = text;
  node.append(title);
  return node;
}

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

/** Short token counts for the axis: 950, 12k, 1.2M. */
function short(n) {
  if (n >= 1e6) {
    return `${(n / 1e6).toFixed(1)}M`;
  }
  if (n >= 1e4) {
    return `${Math.round(n / 1e3)}k`;
  }
  if (n >= 1e3) {
    return `${(n / 1e3).toFixed(1)}k`;
  }
  return String(Math.round(n));
}

/** The polylines of `values` (null breaks the line). */
function lines(xs, values, y, className) {
  const out = [];
  let run = [];
  const flush = () => {
    if (run.length > 1) {
      out.push(svg("polyline", { points: run.join(" "), fill: "none" }, className));
    }
    run = [];
  };
  values.forEach((value, index) => {
    if (isNumber(value)) {
      run.push(`${xs[index].toFixed(1)},${y(value).toFixed(1)}`);
    } else {
      flush();
    }
  });
  flush();
  return out;
}

/** Builds the chart's SVG for `series`. */
export function draw(series) {
  const points = series.points;
  const n = points.length;
  const width = WIDTH - LEFT - RIGHT;
  const step = n > 1 ? width / (n - 1) : width;
  const xs = points.map((_, index) => (n > 1 ? LEFT + index * step : LEFT + width / 2));
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-labelledby": "chart-desc" }, "chart-svg");
  const desc = svg("desc", { id: "chart-desc" });
  desc.textContent = `${texts.chartPct}; ${texts.chartTokens}`;
  root.append(desc);

  // Frames and headings.
  for (const [top, label] of [
    [PCT_TOP, texts.chartPct],
    [TOKENS_TOP, texts.chartTokens],
  ]) {
    root.append(svg("rect", { x: LEFT, y: top, width, height: PLOT, fill: "none" }, "frame"));
    const heading = svg("text", { x: LEFT, y: top - 4 }, "heading");
    heading.textContent = label;
    root.append(heading);
  }

  // Grey bands where a boundary is uncalibrated.
  const band = Math.max(4, n > 1 ? step : width / 4);
  points.forEach((point, index) => {
    if (!isNumber(point.fatiguePct) || !isNumber(point.wakefulnessPct)) {
      const x = Math.max(LEFT, xs[index] - band / 2);
      const right = Math.min(LEFT + width, xs[index] + band / 2);
      root.append(
        titled(svg("rect", { x: x.toFixed(1), y: PCT_TOP, width: (right - x).toFixed(1), height: PLOT }, "gap"), texts.chartLegend.gap),
      );
    }
  });

  // The % plot: 0–100.
  const pctY = (value) => PCT_TOP + PLOT - (Math.min(100, Math.max(0, value)) / 100) * PLOT;
  for (const tick of [0, 50, 100]) {
    const label = svg("text", { x: LEFT - 4, y: pctY(tick) + 3, "text-anchor": "end" }, "tick");
    label.textContent = String(tick);
    root.append(label);
  }
  const fatigue = points.map((point) => point.fatiguePct);
  const wakefulness = points.map((point) => point.wakefulnessPct);
  root.append(...lines(xs, fatigue, pctY, "line-fatigue"), ...lines(xs, wakefulness, pctY, "line-wakefulness"));

  // The tokens plot: 0 to the largest of the inputs and limits.
  let top = 1;
  for (const point of points) {
    top = Math.max(top, point.inputTokens || 0);
    if (point.budget) {
      top = Math.max(top, point.budget.hardInput || 0, point.budget.softInput || 0);
    }
  }
  top *= 1.05;
  const tokensY = (value) => TOKENS_TOP + PLOT - (Math.max(0, value) / top) * PLOT;
  for (const tick of [0, top / 2, top]) {
    const label = svg("text", { x: LEFT - 4, y: tokensY(tick) + 3, "text-anchor": "end" }, "tick");
    label.textContent = short(tick);
    root.append(label);
  }
  const hard = points.map((point) => (point.budget ? point.budget.hardInput : null));
  const soft = points.map((point) => (point.budget ? point.budget.softInput : null));
  // A single point still shows its limits: a short level line across the plot.
  const limitXs = n === 1 ? [LEFT, LEFT + width] : xs;
  const limit = (values) => (n === 1 ? [values[0], values[0]] : values);
  root.append(
    ...lines(limitXs, limit(hard), tokensY, "line-hard"),
    ...lines(limitXs, limit(soft), tokensY, "line-soft"),
    ...lines(xs, points.map((point) => point.inputTokens), tokensY, "line-input"),
  );

  // Maintenance marks, between the points they fell between.
  for (const operation of series.operations) {
    let x;
    if (!isNumber(operation.nextPoint) || operation.nextPoint >= n) {
      x = LEFT + width;
    } else if (operation.nextPoint === 0) {
      x = LEFT;
    } else {
      x = (xs[operation.nextPoint - 1] + xs[operation.nextPoint]) / 2;
    }
    const kind = String(operation.kind || "operation");
    const mark = svg("line", { x1: x.toFixed(1), x2: x.toFixed(1), y1: PCT_TOP, y2: TOKENS_TOP + PLOT }, `op op-${kind.replace(/[^a-z0-9-]/gi, "")}`);
    mark.dataset.operation = String(operation.operationId || "");
    const count = (value) => (isNumber(value) ? grouped(value) : "–");
    root.append(titled(mark, texts.chartOp(kind, operation.outcome || texts.running_, count(operation.inputBefore), count(operation.inputAfter))));
  }

  // One marker per point (input), per known value (fatigue, wakefulness).
  points.forEach((point, index) => {
    const pct = (value) => (isNumber(value) ? `${value.toFixed(1)}%` : texts.uncalibrated);
    const label = texts.chartPoint(index + 1, grouped(point.inputTokens), pct(point.fatiguePct), pct(point.wakefulnessPct));
    const input = svg("circle", { cx: xs[index].toFixed(1), cy: tokensY(point.inputTokens).toFixed(1), r: 2.5 }, "pt pt-input");
    input.dataset.index = String(index);
    root.append(titled(input, label));
    if (isNumber(point.fatiguePct)) {
      root.append(titled(svg("circle", { cx: xs[index].toFixed(1), cy: pctY(point.fatiguePct).toFixed(1), r: 2.5 }, "pt pt-fatigue"), label));
    }
    if (isNumber(point.wakefulnessPct)) {
      root.append(titled(svg("circle", { cx: xs[index].toFixed(1), cy: pctY(point.wakefulnessPct).toFixed(1), r: 2.5 }, "pt pt-wakefulness"), label));
    }
  });
  return root;
}

/** The legend under the chart. */
function legend() {
  const list = el("ul", "legend");
  for (const key of ["fatigue", "wakefulness", "input", "hard", "soft", "gap", "op"]) {
    const item = el("li", `key key-${key}`, texts.chartLegend[key]);
    list.append(item);
  }
  return list;
}

/** The chart of session `id`: at most one load in flight, a load asked meanwhile runs after it. */
export class Chart {
  constructor(id) {
    this.id = id;
    this.closed = false;
    this.running = false;
    this.again = false;
  }

  refresh() {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    this.load().finally(() => {
      this.running = false;
      if (this.again && !this.closed) {
        this.again = false;
        this.refresh();
      }
    });
  }

  async load() {
    const error = document.getElementById("chart-error");
    const box = document.getElementById("chart");
    try {
      const series = await seriesOf(this.id);
      if (this.closed) {
        return;
      }
      const parts = [];
      if (series.points.length === 0) {
        parts.push(el("p", "empty", texts.chartEmpty));
      } else {
        parts.push(draw(series), legend());
      }
      if (series.truncated) {
        parts.push(el("p", "hint", texts.truncated));
      }
      box.replaceChildren(...parts);
      box.dataset.points = String(series.points.length);
      error.hidden = true;
    } catch (failure) {
      if (this.closed) {
        return;
      }
      error.textContent = failure.describe ? failure.describe() : String(failure);
      error.hidden = false;
    }
  }

  close() {
    this.closed = true;
  }
}
