// UI-7 (issue 16 item 7): the next request by part, as a horizontal stacked SVG bar
// built with DOM calls (no library) — one segment per category of
// GET /api/sessions/{id}/context (`categories`, in request order), the hard limit H as
// a marker — and a legend naming each part with its token count. The bar's scale is
// the larger of H and the parts' sum, so a request over H shows past the marker.

import { el } from "./chat.js";
import { grouped, texts } from "./texts.js";

const SVG = "http://www.w3.org/2000/svg";

/** The drawing's geometry (viewBox units). */
const WIDTH = 320;
const BAR = 16;
const HEIGHT = BAR + 8;

/** How many colours the segments cycle through (style.css: `.seg-0` … `.seg-5`). */
const COLOURS = 6;

function svg(tag, attrs, className) {
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
  const title = svg("title", {});
  title.textContent = text;
  node.append(title);
  return node;
}

/** The people's name of category `name`: the table's, else the name itself. */
export function categoryLabel(name) {
  const known = texts.categoryNames[name];
  return typeof known === "string" ? known : name;
}

/** The valid categories of `report`: `{name, tokens}` with a whole, non-negative count. */
function partsOf(report) {
  const categories = Array.isArray(report.categories) ? report.categories : [];
  return categories
    .filter((category) => category && typeof category === "object")
    .map((category) => ({ name: String(category.name ?? "?"), tokens: category.tokens }))
    .filter((part) => Number.isSafeInteger(part.tokens) && part.tokens >= 0);
}

/** Draws the breakdown of `report` into `node` (emptied when the report has no parts). */
export function renderBreakdown(node, report) {
  const parts = partsOf(report);
  if (parts.length === 0) {
    node.replaceChildren(el("p", "empty", texts.noBreakdown));
    return;
  }
  const sum = parts.reduce((total, part) => total + part.tokens, 0);
  const hard = report.budget && Number.isSafeInteger(report.budget.hardInput) ? report.budget.hardInput : null;
  const scale = Math.max(1, sum, hard ?? 0);
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-labelledby": "breakdown-desc" }, "breakdown-svg");
  const desc = svg("desc", { id: "breakdown-desc" });
  desc.textContent = texts.categories;
  root.append(desc);
  root.append(svg("rect", { x: 0, y: 4, width: WIDTH, height: BAR }, "track"));
  const legend = el("ul", "breakdown-legend");
  let x = 0;
  parts.forEach((part, index) => {
    const width = (part.tokens / scale) * WIDTH;
    const label = categoryLabel(part.name);
    const colour = `seg-${index % COLOURS}`;
    const segment = svg("rect", { x: x.toFixed(2), y: 4, width: width.toFixed(2), height: BAR }, `seg ${colour}`);
    segment.dataset.category = part.name;
    segment.dataset.tokens = String(part.tokens);
    root.append(titled(segment, texts.breakdownPart(label, grouped(part.tokens))));
    x += width;
    const item = el("li", "breakdown-item");
    item.dataset.category = part.name;
    const swatch = el("span", `swatch ${colour}`);
    swatch.setAttribute("aria-hidden", "true");
    item.append(swatch, el("span", "breakdown-label", label), el("span", "breakdown-tokens", texts.tokens(grouped(part.tokens))));
    legend.append(item);
  });
  if (hard !== null) {
    const at = Math.min(WIDTH - 1, (hard / scale) * WIDTH);
    const marker = svg("line", { x1: at.toFixed(2), x2: at.toFixed(2), y1: 0, y2: HEIGHT }, "hard-marker");
    marker.dataset.tokens = String(hard);
    root.append(titled(marker, texts.breakdownHard(grouped(hard))));
    const item = el("li", "breakdown-item breakdown-hard");
    const swatch = el("span", "swatch hard");
    swatch.setAttribute("aria-hidden", "true");
    item.append(swatch, el("span", "breakdown-label", texts.hardLimit), el("span", "breakdown-tokens", texts.tokens(grouped(hard))));
    legend.append(item);
  }
  node.replaceChildren(root, legend);
}
