// UI-2: the "Budget & maintenance" panel on the right — the overview of the next
// request (full input, hard limit, utilisation; details of the budget on demand), and
// the maintenance records of /context-care/actions, 20 a page, each row opening its
// reason, replaced ranges and raw JSON (only on request). Load errors show the HTTP
// status and code (UI-6); the refresh button retries. Text from the server goes in
// with textContent (UI-5). The overview draws the next request by part (breakdown.js);
// a seq box finds the action covering a seq and opens its page and row (issue 16 item 2).

import { actionCoveringSeq, actionsOf, contextReportOf } from "./api.js";
import { renderBreakdown } from "./breakdown.js";
import { el } from "./chat.js";
import { showDetail } from "./detail.js";
import { grouped, texts } from "./texts.js";

/** Rows per page (UI-6). */
export const PAGE = 20;

function byId(id) {
  return document.getElementById(id);
}

function showError(node, failure) {
  if (failure) {
    node.textContent = failure.describe ? failure.describe() : String(failure);
    node.hidden = false;
  } else {
    node.textContent = "";
    node.hidden = true;
  }
}

function count(n) {
  return typeof n === "number" && Number.isFinite(n) ? texts.tokens(grouped(n)) : "–";
}

/** One `<dt>`/`<dd>` pair. */
function fact(label, value, id) {
  const dd = el("dd", "", value);
  if (id) {
    dd.id = id;
  }
  return [el("dt", "", label), dd];
}

/** Renders the overview of a context report. */
export function renderOverview(report) {
  byId("budget-input").textContent = count(report.inputTokens);
  const budget = report.budget;
  if (budget) {
    byId("budget-hard").textContent = count(budget.hardInput);
    const use = budget.hardInput > 0 ? (report.inputTokens / budget.hardInput) * 100 : null;
    byId("budget-use").textContent = use === null ? "–" : `${use.toFixed(1)}%`;
  } else {
    byId("budget-hard").textContent = texts.noCapacity;
    byId("budget-use").textContent = texts.noCapacity;
  }
  const facts = [];
  if (budget) {
    const capacity = Array.isArray(report.capacity) ? report.capacity : null;
    const source = capacity ? texts.capacitySource[capacity[1]] || String(capacity[1]) : "";
    facts.push(
      ...fact(texts.purpose, String(budget.purpose ?? "–")),
      ...fact(texts.capacity, source ? `${count(budget.capacity)} · ${source}` : count(budget.capacity)),
      ...fact(texts.physicalWindow, count(budget.physicalWindow)),
      ...fact(texts.policyCapacity, count(budget.policyCapacity)),
      ...fact(texts.softThreshold, count(budget.softInput), "budget-soft"),
      ...fact(texts.releaseTarget, count(budget.releaseTarget)),
      ...fact(texts.tail, count(budget.tail)),
      ...fact(texts.outputReserve, count(budget.maxTokens)),
      ...fact(texts.safetyReserve, `${count(budget.safetyTokens)} + ${count(budget.burstTokens)}`),
    );
  }
  facts.push(
    ...fact(texts.calibration, String(report.calibration)),
    ...fact(texts.textScale, typeof report.textScale === "number" ? String(report.textScale) : "–"),
    ...fact(texts.phase, String(report.assessment && report.assessment.phase ? report.assessment.phase : "–")),
    ...fact(texts.armed, report.armed ? texts.yes : texts.no),
    ...fact(texts.injected, count(report.injectedTokens)),
  );
  if (Array.isArray(report.categories) && report.categories.length > 0) {
    facts.push(el("dt", "facts-head", texts.categories), el("dd", "facts-head", ""));
    for (const category of report.categories) {
      facts.push(...fact(String(category.name), count(category.tokens)));
    }
  }
  byId("budget-facts").replaceChildren(...facts);
  byId("budget-raw").textContent = JSON.stringify(report, null, 2);
  renderBreakdown(byId("budget-breakdown"), report);
}

function when(at) {
  if (typeof at !== "number") {
    return "–";
  }
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? "–" : date.toLocaleString();
}

/** One maintenance row: action, status, time, input before → after; its details on demand. */
function actionRow(record, id, onUndone) {
  const data = record.data && typeof record.data === "object" ? record.data : {};
  const status = typeof data.outcome === "string" ? data.outcome : texts.running_;
  const item = el("li", "action-row");
  item.dataset.operation = String(data.operationId ?? "");
  const details = el("details");
  const summary = el("summary");
  // The seqs of the nodes it wrote (its checkpoints), the ones "find seq" also matches.
  const written = Array.isArray(data.replacements)
    ? data.replacements.filter((range) => range && typeof range.newSeq === "number").map((range) => `#${range.newSeq}`)
    : [];
  summary.append(
    el("span", "action-kind", String(data.action ?? "?")),
    el("span", "action-seq", written.join(" ")),
    el("span", `action-status s-${status}`, status),
    el("time", "action-time", when(record.at)),
    el("span", "action-input", `${count(data.beforeInput)} → ${count(data.afterInput)}`),
  );
  const facts = el("dl", "facts");
  facts.append(...fact(texts.operation, String(data.operationId ?? "–")));
  if (data.reason !== undefined && data.reason !== null) {
    facts.append(...fact(texts.reason, String(data.reason)));
  }
  if (Array.isArray(data.replacements)) {
    const ranges = data.replacements
      .map((range) => (range && typeof range === "object" ? `${range.oldStartSeq ?? "?"}–${range.oldEndSeq ?? "?"} → #${range.newSeq ?? "?"}` : String(range)))
      .join(", ");
    facts.append(...fact(texts.replacements, ranges || "–"));
  }
  if (data.error !== undefined && data.error !== null) {
    facts.append(...fact(texts.error, typeof data.error === "string" ? data.error : JSON.stringify(data.error)));
  }
  const raw = el("details", "raw");
  const rawText = el("pre", "text");
  raw.append(el("summary", "", texts.rawJson), rawText);
  // The JSON is written only when asked for (UI-2: raw JSON on request).
  raw.addEventListener("toggle", () => {
    if (raw.open && rawText.textContent === "") {
      rawText.textContent = JSON.stringify(record, null, 2);
    }
  });
  // The same detail view as the chat's checkpoint row (CC-EXT-3), loaded on opening.
  const detail = el("div", "action-detail");
  details.addEventListener("toggle", () => {
    if (details.open && typeof data.operationId === "string") {
      showDetail(detail, id, data.operationId, onUndone);
    }
  });
  details.append(summary, facts, detail, raw);
  // Escape closes the open row from anywhere inside it and gives the focus back to
  // its summary, so the keyboard returns to the row it opened.
  details.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && details.open) {
      event.preventDefault();
      event.stopPropagation();
      details.open = false;
      summary.focus();
    }
  });
  item.append(details);
  return item;
}

/** The operation of the row holding the focus, and whether that row is open; null when the focus is elsewhere. */
function focusedRow() {
  const active = document.activeElement;
  const row = active && active.closest ? active.closest("#actions li.action-row") : null;
  if (!row) {
    return null;
  }
  const details = row.querySelector("details");
  return { operation: row.dataset.operation, open: Boolean(details && details.open) };
}

/** Focuses the summary of the row of `operation` (opening it if `open`); whether it was found. */
function focusRow(operation, open) {
  const row = [...byId("actions").querySelectorAll("li.action-row")].find((item) => item.dataset.operation === operation);
  if (!row) {
    return false;
  }
  const details = row.querySelector("details");
  if (details && open) {
    details.open = true;
  }
  const summary = row.querySelector("summary");
  if (summary) {
    summary.focus();
  }
  return true;
}

/** The panel of session `id`: at most one load in flight, a load asked meanwhile runs after it. */
export class Panel {
  /** `onUndone(op)`: what to do once an undo from a row's detail is durable. */
  constructor(id, onUndone) {
    this.id = id;
    this.onUndone = onUndone;
    /** The operation whose row takes the focus once the next page is drawn (after an undo from it). */
    this.focusOperation = null;
    this.offset = 0;
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
    Promise.all([this.loadOverview(), this.loadActions()]).finally(() => {
      this.running = false;
      if (this.again && !this.closed) {
        this.again = false;
        this.refresh();
      }
    });
  }

  async loadOverview() {
    try {
      const report = await contextReportOf(this.id);
      if (!this.closed) {
        renderOverview(report);
        showError(byId("budget-error"), null);
      }
    } catch (failure) {
      if (!this.closed) {
        showError(byId("budget-error"), failure);
      }
    }
  }

  async loadActions() {
    try {
      const page = await actionsOf(this.id, PAGE, this.offset);
      if (this.closed) {
        return;
      }
      if (page.actions.length === 0 && page.total > 0 && this.offset > 0) {
        // The journal was trimmed under this page: go to the last one.
        this.offset = Math.max(0, Math.floor((page.total - 1) / PAGE) * PAGE);
        this.again = true;
        return;
      }
      // An undo from a row reopens the session at this page, the focus on that row.
      const onUndone = (op, done) => this.onUndone(op, done, { panelOffset: page.offset });
      const rows = page.actions.map((record) => actionRow(record, this.id, onUndone));
      if (rows.length === 0) {
        rows.push(el("li", "empty", texts.noActions));
      }
      // Redrawing keeps the keyboard where it was: a focused row is focused again.
      const kept = focusedRow();
      byId("actions").replaceChildren(...rows);
      if (this.focusOperation !== null) {
        if (!focusRow(this.focusOperation, false)) {
          byId("actions-range").focus();
        }
        this.focusOperation = null;
      } else if (kept) {
        focusRow(kept.operation, kept.open);
      }
      const from = page.actions.length === 0 ? 0 : page.offset + 1;
      byId("actions-range").textContent = texts.pageOf(from, page.offset + page.actions.length, page.total);
      const prev = byId("actions-prev");
      const next = byId("actions-next");
      const active = document.activeElement;
      prev.disabled = page.offset === 0;
      next.disabled = page.nextOffset === null;
      // A pager button that just became disabled hands the focus to the other one.
      if (active === next && next.disabled && !prev.disabled) {
        prev.focus();
      } else if (active === prev && prev.disabled && !next.disabled) {
        next.focus();
      }
      this.nextOffset = page.nextOffset;
      showError(byId("actions-error"), null);
    } catch (failure) {
      if (!this.closed) {
        showError(byId("actions-error"), failure);
      }
    }
  }

  /**
   * Finds the action covering `seq` (its replaced ranges hold it, or its node is it),
   * shows the page holding it and opens its row, focused; says so when none does.
   */
  async seekSeq(seq) {
    const status = byId("actions-status");
    status.textContent = texts.searching;
    status.hidden = false;
    let found;
    try {
      found = await actionCoveringSeq(this.id, seq);
    } catch (failure) {
      if (!this.closed) {
        status.hidden = true;
        showError(byId("actions-error"), failure);
      }
      return;
    }
    if (this.closed) {
      return;
    }
    if (found === null) {
      status.textContent = texts.noActionAt(seq);
      return;
    }
    this.offset = Math.floor(found.index / PAGE) * PAGE;
    await this.loadActions();
    if (this.closed) {
      return;
    }
    const row = [...byId("actions").querySelectorAll("li.action-row")].find((item) => item.dataset.operation === found.operationId);
    if (!row) {
      // The list changed under the search (trimmed or grown): say what was found anyway.
      status.textContent = texts.actionAt(seq, found.operationId);
      return;
    }
    status.textContent = texts.actionAt(seq, found.operationId);
    const details = row.querySelector("details");
    if (details) {
      details.open = true;
    }
    row.classList.add("found");
    const summary = row.querySelector("summary");
    if (summary) {
      summary.focus();
    }
    row.scrollIntoView({ block: "nearest" });
  }

  /** Goes `step` pages (±1) through the maintenance list. */
  page(step) {
    if (step > 0 && typeof this.nextOffset === "number") {
      this.offset = this.nextOffset;
    } else if (step < 0) {
      this.offset = Math.max(0, this.offset - PAGE);
    } else {
      return;
    }
    this.loadActions();
  }

  close() {
    this.closed = true;
  }
}
