// UI-1: the indicator under the input box — fatigue and wakefulness as a percentage
// with one decimal, the level name and the seed's colour. CC-MET-5: the live sample
// first (GET /api/sessions/{id}/context, a fresh sample of the next request); when
// there is none (the session cannot be sampled here: another process drives it, or
// context care failed), the recorded one as history fallback (this process's last
// boundary sample, else the `contextCareNumeric` projection of the latest status
// notice), marked as such; "—" in grey when neither exists. A null value is
// "uncalibrated" in grey: no number is ever derived from a level.

import { contextOf, recordedSampleOf } from "./api.js";
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

/** Shows one metric in `element`: "Fatigue 12.3% · normal", "Fatigue uncalibrated", or "Fatigue —" without a sample. */
function show(element, label, value, level, colours, sampled) {
  element.classList.remove(...COLOURS);
  const known = typeof value === "number" && Number.isFinite(value) && level in colours;
  if (known) {
    element.textContent = `${label} ${value.toFixed(1)}% · ${texts.levels[level] || level}`;
    element.classList.add(colours[level]);
  } else {
    element.textContent = `${label} ${sampled ? texts.uncalibrated : texts.noMetric}`;
    element.classList.add("c-grey");
  }
  element.dataset.level = known ? level : "unknown";
}

/** Says where the numbers come from: nothing for the live sample, else the fallback's source. */
function showSource(source, seq) {
  const node = document.getElementById("indicator-source");
  const line = { live: "", boundary: texts.sampleBoundary, log: texts.sampleRecorded(seq), none: texts.sampleNone }[source];
  node.textContent = line || "";
  node.hidden = !line;
  document.getElementById("indicator").dataset.source = source;
}

/** Renders a sample's metrics (`null`: no sample at all); `source`: live, boundary, log or none. */
export function render(metrics, source = "live", seq = null) {
  const sampled = metrics !== null;
  const values = metrics || { fatigue: null, fatigueValue: null, wakefulness: null, wakefulnessValue: null };
  show(document.getElementById("fatigue"), texts.fatigue, values.fatigueValue, values.fatigue, FATIGUE_COLOURS, sampled);
  show(
    document.getElementById("wakefulness"),
    texts.wakefulness,
    values.wakefulnessValue,
    values.wakefulness,
    WAKEFULNESS_COLOURS,
    sampled,
  );
  showSource(source, seq);
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
    let failure;
    try {
      const metrics = await contextOf(this.id);
      if (this.closed) {
        return;
      }
      render(metrics);
      error.hidden = true;
      return;
    } catch (caught) {
      failure = caught;
    }
    // No live sample: the recorded one, if the log or this process has one.
    let recorded = null;
    try {
      recorded = await recordedSampleOf(this.id);
    } catch {
      recorded = null;
    }
    if (this.closed) {
      return;
    }
    if (recorded && (recorded.source === "boundary" || recorded.source === "log")) {
      render(recorded, recorded.source, recorded.sampledSeq);
    } else {
      render(null, "none");
    }
    error.textContent = failure.describe ? failure.describe() : String(failure);
    error.hidden = false;
  }

  close() {
    this.closed = true;
  }
}
