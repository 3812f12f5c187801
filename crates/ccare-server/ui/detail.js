// CC-EXT-3 (issue 16 item 4): one maintenance action in detail — what each replace node
// replaced (the shadowed events' text) beside the checkpoint text, as a two-column diff
// (stacked at phone width), the input before → after, the summary call's usage, the
// coverage, whether it was undone, and an Undo button. The chat's checkpoint rows and
// the panel's maintenance rows both show it. A refusal (409) is shown with its reason;
// on success `onUndone` runs (the app reloads the session). Text from the server goes
// in with textContent (UI-5).

import { actionDetailOf, undoAction } from "./api.js";
import { el } from "./chat.js";
import { grouped, texts } from "./texts.js";

function count(n) {
  return typeof n === "number" && Number.isFinite(n) ? texts.tokens(grouped(n)) : "–";
}

function fact(label, value, className) {
  return [el("dt", "", label), el("dd", className || "", value)];
}

/** The reason line of an undo the server refused (or failed). */
export function refusalLine(failure) {
  const code = failure && failure.code ? failure.code : null;
  const why = code && texts.undoRefused[code] ? texts.undoRefused[code] : code || "";
  const message = failure && failure.message ? failure.message : String(failure);
  if (failure && failure.status === 409) {
    return texts.undoRefusedLine(why, message);
  }
  return texts.undoFailed(failure && failure.describe ? failure.describe() : message);
}

/** One side of a replaced range: its heading and its events' texts. */
function column(className, heading, events) {
  const side = el("div", className);
  side.append(el("h4", "", heading));
  for (const event of events) {
    const block = el("div", "diff-event");
    block.append(el("div", "diff-kind", `#${event.seq} · ${event.kind}`), el("pre", "text", String(event.text ?? "")));
    side.append(block);
  }
  if (events.length === 0) {
    side.append(el("p", "empty", "–"));
  }
  return side;
}

/** Draws a loaded detail into `node`, with the Undo button. */
function draw(node, id, detail, onUndone) {
  const facts = el("dl", "facts");
  facts.append(
    ...fact(texts.operation, String(detail.operationId)),
    ...fact(texts.action, String(detail.action ?? "–")),
    ...fact(texts.reason, String(detail.reason ?? "–")),
    ...fact(texts.status, String(detail.outcome ?? "–")),
    ...fact(texts.inputChange, `${count(detail.beforeInput)} → ${count(detail.afterInput)}`, "detail-input"),
  );
  const usage = detail.summaryUsage;
  if (usage && typeof usage === "object") {
    facts.append(...fact(texts.summaryUsage, texts.usageOf(grouped(usage.input), grouped(usage.cacheRead), grouped(usage.cacheWrite), grouped(usage.output))));
  }
  const coverage = detail.coverage;
  if (coverage && typeof coverage === "object") {
    const leaves = Array.isArray(coverage.leafSeqs) ? coverage.leafSeqs.length : 0;
    const parents = Array.isArray(coverage.parentCheckpointSeqs) ? coverage.parentCheckpointSeqs.length : 0;
    facts.append(...fact(texts.coverage, texts.coverageOf(leaves, parents, coverage.depth ?? 0)));
  }
  facts.append(...fact(texts.undoneAt, typeof detail.undoneAtSeq === "number" ? `#${detail.undoneAtSeq}` : texts.no, "detail-undone"));
  const parts = [facts];
  for (const range of detail.replacements) {
    const diff = el("div", "diff");
    diff.dataset.newSeq = String(range.newSeq ?? "");
    const checkpoint = range.checkpoint && typeof range.checkpoint === "object" ? [range.checkpoint] : [];
    diff.append(
      column("diff-old", texts.replacedEvents(range.oldStartSeq ?? "?", range.oldEndSeq ?? "?"), range.shadowed),
      column("diff-new", texts.checkpointText, checkpoint),
    );
    parts.push(diff);
  }
  const button = el("button", "undo", texts.undo);
  button.type = "button";
  const outcome = el("p", "undo-error error");
  outcome.setAttribute("role", "alert");
  outcome.hidden = true;
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = texts.undoing;
    outcome.hidden = true;
    try {
      const done = await undoAction(id, detail.operationId);
      if (onUndone) {
        onUndone(detail.operationId, done);
      }
    } catch (failure) {
      outcome.textContent = refusalLine(failure);
      outcome.hidden = false;
    } finally {
      button.disabled = false;
      button.textContent = texts.undo;
    }
  });
  const actions = el("div", "detail-actions");
  actions.append(button, outcome);
  parts.push(actions);
  node.replaceChildren(...parts);
}

/**
 * Loads action `op` of session `id` into `node` (a load error shows its HTTP status and
 * code); resolves to whether the detail was drawn.
 */
export async function showDetail(node, id, op, onUndone) {
  node.replaceChildren(el("p", "empty", texts.detailLoading));
  try {
    draw(node, id, await actionDetailOf(id, op), onUndone);
    return true;
  } catch (failure) {
    const line = el("p", "error", failure && failure.describe ? failure.describe() : String(failure));
    line.setAttribute("role", "alert");
    node.replaceChildren(line);
    return false;
  }
}
