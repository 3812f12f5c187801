// UI-1: the indicator under the input box — fatigue and wakefulness as a percentage
// with one decimal, the level name and the seed's colour, from the live sample of
// GET /api/sessions/{id}/context. A null value is "uncalibrated" in grey: no number is
// ever derived from a level (CC-MET-5).

import { contextOf } from "./api.js";
import { texts } from "./texts.js";

/** The colour class of each fatigue level. */
export const FATIGUE_COLOURS = {
  normal: "c-green",
  elevated: "c-blue",
  high: "c-orange",
  "very-high": "c-red",
};

/** The colour class of each wakefulness level. */
export const WAKEFULNESS_COLOURS = {
  low: "c-orange",
  normal: "c-blue",
  elevated: "c-teal",
  high: "c-green",
};

const COLOURS = ["c-green", "c-blue", "c-orange", "c-red", "c-teal", "c-grey"];

/** Shows one metric in `element`: "Fatigue 12.3% · normal", or "Fatigue uncalibrated". */
function show(element, label, value, level, colours) {
  element.classList.remove(...COLOURS);
  const known = typeof value === "number" && Number.isFinite(value) && level in colours;
  if (known) {
    element.textContent = `${label} ${value.toFixed(1)}% · ${texts.levels[level] || level}`;
    element.classList.add(colours[level]);
  } else {
    element.textContent = `${label} ${texts.uncalibrated}`;
    element.classList.add("c-grey");
  }
  element.dataset.level = known ? level : "unknown";
}

/** Renders a context report's metrics. */
export function render(metrics) {
  show(document.getElementById("fatigue"), texts.fatigue, metrics.fatigueValue, metrics.fatigue, FATIGUE_COLOURS);
  show(
    document.getElementById("wakefulness"),
    texts.wakefulness,
    metrics.wakefulnessValue,
    metrics.wakefulness,
    WAKEFULNESS_COLOURS,
  );
}

/** Refreshes the indicator of session `id`, at most one request in flight (a request asked meanwhile runs after it). */
export class Indicator {
  constructor(id) {
    this.id = id;
    this.running = false;
    this.again = false;
    this.closed = false;
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
    const error = document.getElementById("indicator-error");
    try {
      const metrics = await contextOf(this.id);
      if (this.closed) {
        return;
      }
      render(metrics);
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
