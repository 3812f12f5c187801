// UI-3: the prompts tab — every prompt, notice, time reading and checkpoint plugins put
// in front of the model, read from /context-care/prompts (the whole persisted session,
// not only what the chat holds), 20 a page, oldest first: its source (publisher, kind,
// trigger, rules), time, seq, placement, the exact body (copyable) and a *locate*
// action. Locate scrolls the chat to the message of that exact seq and highlights it;
// an entry a checkpoint replaced, or one with no message in the chat, is reported as
// "no chat node" — never a neighbour instead. Text goes in with textContent (UI-5).

import { promptsOf } from "./api.js";
import { el } from "./chat.js";
import { texts } from "./texts.js";

/** Entries per page (UI-6). */
export const PAGE = 20;

function byId(id) {
  return document.getElementById(id);
}

function show(node, text) {
  node.textContent = text || "";
  node.hidden = !text;
}

function when(at) {
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? "–" : date.toLocaleString();
}

/** Scrolls the chat to the message logged at `seq` and highlights it; says what happened. */
export function locate(entry) {
  const status = byId("prompts-status");
  for (const old of document.querySelectorAll("#conversation .located")) {
    old.classList.remove("located");
  }
  if (!entry.live) {
    show(status, texts.noChatNodeReplaced(entry.seq));
    return false;
  }
  const node = document.querySelector(`#conversation > [data-seq="${Number(entry.seq)}"]`);
  if (!node) {
    show(status, texts.noChatNode(entry.seq));
    return false;
  }
  for (const details of node.querySelectorAll("details")) {
    details.open = true;
  }
  node.classList.add("located");
  node.scrollIntoView({ block: "center" });
  const list = byId("conversation").getBoundingClientRect();
  const box = node.getBoundingClientRect();
  const inView = box.bottom > list.top && box.top < list.bottom;
  show(status, inView ? texts.located(entry.seq) : texts.noChatNode(entry.seq));
  return inView;
}

/** The prompts tab of session `id`. */
export class Prompts {
  constructor(id) {
    this.id = id;
    this.offset = 0;
    this.seq = null;
    this.nextOffset = null;
    this.closed = false;
    this.generation = 0;
    show(byId("prompts-error"), null);
    show(byId("prompts-status"), null);
    byId("prompts").replaceChildren();
    byId("prompts-range").textContent = "";
  }

  refresh() {
    this.load();
  }

  /** Opens the page holding the entry logged at `seq`, and marks it. */
  showSeq(seq) {
    this.seq = seq;
    this.load();
  }

  /** Goes `step` pages (±1). */
  page(step) {
    this.seq = null;
    if (step > 0 && typeof this.nextOffset === "number") {
      this.offset = this.nextOffset;
    } else if (step < 0) {
      this.offset = Math.max(0, this.offset - PAGE);
    } else {
      return;
    }
    this.load();
  }

  async load() {
    const generation = ++this.generation;
    const seq = this.seq;
    try {
      const page = await promptsOf(this.id, PAGE, seq === null ? { offset: this.offset } : { seq });
      if (this.closed || generation !== this.generation) {
        return;
      }
      this.offset = page.offset;
      this.nextOffset = page.nextOffset;
      const rows = page.prompts.map((entry) => this.row(entry, seq));
      if (rows.length === 0) {
        rows.push(el("li", "empty", texts.noPrompts));
      }
      byId("prompts").replaceChildren(...rows);
      const from = page.prompts.length === 0 ? 0 : page.offset + 1;
      byId("prompts-range").textContent = texts.pageOf(from, page.offset + page.prompts.length, page.total);
      byId("prompts-prev").disabled = page.offset === 0;
      byId("prompts-next").disabled = page.nextOffset === null;
      show(byId("prompts-error"), null);
      if (seq !== null) {
        const selected = byId("prompts").querySelector(".prompt.selected");
        if (page.selectedFound && selected) {
          selected.scrollIntoView({ block: "nearest" });
          show(byId("prompts-status"), null);
        } else {
          show(byId("prompts-status"), texts.noPromptAt(seq));
        }
      }
    } catch (failure) {
      if (!this.closed && generation === this.generation) {
        show(byId("prompts-error"), failure.describe ? failure.describe() : String(failure));
      }
    }
  }

  row(entry, selectedSeq) {
    const item = el("li", entry.seq === selectedSeq ? "prompt selected" : "prompt");
    item.dataset.seq = String(entry.seq);
    const head = el("div", "prompt-head");
    head.append(
      el("span", "prompt-label", entry.label || entry.kind),
      el("span", `prompt-placement p-${entry.placement}`, texts.placement[entry.placement] || String(entry.placement)),
    );
    const facts = el("dl", "facts");
    const fact = (label, value, className) => {
      const dd = el("dd", className || "", value);
      facts.append(el("dt", "", label), dd);
    };
    fact(texts.publisher, entry.publisher || "–", "prompt-publisher");
    fact(texts.sourceKind, entry.kind, "prompt-kind");
    fact(texts.trigger, entry.trigger || "–", "prompt-trigger");
    if (entry.rules.length > 0) {
      fact(texts.fromRules, entry.rules.join(", "), "prompt-rules");
    }
    fact(texts.seq, String(entry.seq), "prompt-seq");
    fact(texts.time, when(entry.at));
    if (typeof entry.turn === "number") {
      fact(texts.turn, String(entry.turn));
    }
    if (entry.callId) {
      fact(texts.call, entry.callId);
    }
    fact(texts.onSurface, entry.live ? texts.yes : texts.replacedByCheckpoint, "prompt-live");
    const body = el("pre", "text prompt-body", entry.body);
    const actions = el("div", "prompt-actions");
    const copy = el("button", "prompt-copy", texts.copy);
    copy.type = "button";
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(entry.body);
        show(byId("prompts-status"), texts.copied(entry.seq));
      } catch {
        // No clipboard (an insecure origin): select the text for a manual copy.
        const range = document.createRange();
        range.selectNodeContents(body);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        show(byId("prompts-status"), texts.selectedForCopy);
      }
    });
    const find = el("button", "prompt-locate", texts.locate);
    find.type = "button";
    find.addEventListener("click", () => locate(entry));
    actions.append(copy, find);
    item.append(head, facts, body, actions);
    return item;
  }

  close() {
    this.closed = true;
  }
}
