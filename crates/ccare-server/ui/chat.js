// The conversation of one session, drawn from its event stream (API-3): committed
// events as they are replayed and then live, and `delta` frames streaming the answer
// being written, which the committed `assistant/message` then replaces.
//
// Every text from a model, a tool or a plugin goes in with textContent (UI-5).

import { texts } from "./texts.js";

/** An element with a class and, optionally, its text. */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** The text of a message's text blocks. */
function textOf(content) {
  return (Array.isArray(content) ? content : [])
    .filter((block) => block && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text)
    .join("");
}

/**
 * The images among a message's blocks, or null when it has none: an inline image is
 * drawn (a data: URL, which the page's CSP allows), one by address is named, never
 * fetched (the page loads nothing from elsewhere).
 */
function attachments(content) {
  const images = (Array.isArray(content) ? content : []).filter(
    (block) => block && block.type === "image",
  );
  if (images.length === 0) {
    return null;
  }
  const list = el("div", "attachments");
  for (const image of images) {
    const mediaType = typeof image.media_type === "string" ? image.media_type : "";
    if (typeof image.data === "string" && mediaType.startsWith("image/")) {
      const drawn = el("img", "attachment");
      drawn.alt = texts.image;
      drawn.src = `data:${mediaType};base64,${image.data}`;
      list.append(drawn);
    } else if (typeof image.uri === "string") {
      list.append(el("div", "attachment-ref", texts.imageAt(image.uri)));
    } else {
      list.append(el("div", "attachment-ref", texts.image));
    }
  }
  return list;
}

/** A compact one-line form of tool arguments. */
function shortArgs(value) {
  let text;
  try {
    text = typeof value === "string" ? value : JSON.stringify(value);
  } catch {
    text = "";
  }
  text = text || "";
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

/** What a turn's end says about who stopped it, or null for a completed turn. */
export function stopNote(reason) {
  if (!reason || typeof reason !== "object") {
    return null;
  }
  switch (reason.kind) {
    case "completed":
      return null;
    case "aborted": {
      const cause = reason.cause || {};
      if (cause.kind === "user") {
        return texts.stoppedBy.user;
      }
      if (cause.kind === "hook") {
        return cause.plugin === "stream-watch"
          ? texts.stoppedBy.streamWatch(cause.reason)
          : texts.stoppedBy.plugin(cause.plugin || "a plugin", cause.reason);
      }
      if (cause.kind === "shutdown") {
        return texts.stoppedBy.shutdown;
      }
      if (cause.kind === "timeout") {
        return texts.stoppedBy.timeout;
      }
      return texts.interrupted;
    }
    case "blocked":
      return texts.blocked(reason.by || "?", reason.detail || "");
    case "error": {
      const failure = reason.failure || {};
      return texts.failed(failure.code || "ERROR", failure.message || "");
    }
    case "max-tokens":
      return texts.maxTokens;
    case "interrupted":
      return texts.repaired;
    default:
      return String(reason.kind);
  }
}

/** The conversation view: feed it every frame of the stream with `handle`. */
export class Conversation {
  /**
   * @param {HTMLOListElement} list where the messages go
   * @param {{boundary: () => void, state: (state: string) => void, idle?: () => void,
   *   details?: (seq: number) => void, fork?: (seq: number) => void,
   *   checkpoint?: (seq: number, node: HTMLElement) => Promise<boolean>}} on what to call at a
   *   request boundary, when the session's state changes, when the stream says the
   *   session went idle (live only), when a notice's *details* is clicked and when
   *   *fork here* is, and when a checkpoint row is opened (draw its detail into `node`)
   */
  constructor(list, on) {
    this.list = list;
    this.on = on;
    this.live = new Map(); // callId → {item, blocks: Map(index → element)}
    this.tools = new Map(); // callId → {row, status, result}
    this.lastAssistant = new Map(); // turn → the last assistant item
    this.bySeq = new Map(); // seq → the element drawn for that committed event
    this.surface = []; // the live seqs, in order (H-EVT surface ops replayed)
    this.shadowedBy = new Map(); // replace node seq → the seqs it shadowed
  }

  /** Appends `item`, keeping the view at the bottom if it was there. */
  append(item) {
    const scroller = this.list;
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
    this.list.append(item);
    if (atBottom) {
      scroller.scrollTop = scroller.scrollHeight;
    }
  }

  /** One frame: `type` is the SSE event name, `data` its parsed JSON. */
  handle(type, data) {
    if (type === "delta") {
      this.delta(data);
      return;
    }
    if (type === "idle") {
      this.on.state("idle");
      this.on.boundary();
      if (this.on.idle) {
        this.on.idle();
      }
      return;
    }
    if (type === "awaiting-tools") {
      this.on.state("awaiting-tools");
      return;
    }
    // A committed event: the envelope {seq, time_ms, type, data, ...}.
    const body = data && typeof data.data === "object" && data.data !== null ? data.data : {};
    if (type.startsWith("request/")) {
      this.on.boundary();
    }
    switch (type) {
      case "user/message":
        this.userMessage(body.message || {}, data.seq);
        break;
      case "assistant/message":
        this.assistantMessage(body, data.seq);
        break;
      case "assistant/attempt":
        this.dropLive(body.call_id);
        break;
      case "tool/call":
        this.toolRow(body.call_id, body.name, body.arguments);
        break;
      case "tool/result":
        this.toolResult(body, data.seq);
        break;
      case "turn/start":
        this.on.state("running");
        break;
      case "turn/end":
        this.turnEnd(body, data.seq);
        // The stream marks idle only live: a replayed session's last turn ended here.
        this.on.state("idle");
        this.on.boundary();
        break;
      default:
        break;
    }
    this.surfaceOp(data);
  }

  /**
   * Replays an event's surface op (append, replace, restore) so that messages a
   * checkpoint shadows are marked as such, and are live again once it is undone.
   */
  surfaceOp(event) {
    const op = event && event.surface && typeof event.surface === "object" ? event.surface : null;
    const seq = event ? event.seq : undefined;
    if (!op || typeof seq !== "number") {
      return;
    }
    if (op.op === "append") {
      this.surface.push(seq);
    } else if (op.op === "replace") {
      const from = this.surface.indexOf(op.start_seq);
      const to = this.surface.indexOf(op.end_seq);
      if (from < 0 || to < from) {
        this.surface.push(seq);
        return;
      }
      const removed = this.surface.splice(from, to - from + 1, seq);
      this.shadowedBy.set(seq, removed);
      for (const gone of removed) {
        this.markShadowed(gone, true);
      }
    } else if (op.op === "restore") {
      const target = op.replace_seq;
      const at = this.surface.indexOf(target);
      const restored = this.shadowedBy.get(target);
      if (at < 0 || !restored) {
        return;
      }
      this.surface.splice(at, 1, ...restored);
      this.shadowedBy.delete(target);
      this.markShadowed(target, true);
      for (const back of restored) {
        this.markShadowed(back, false);
      }
      const checkpoint = this.bySeq.get(target);
      if (checkpoint && checkpoint.classList.contains("checkpoint")) {
        checkpoint.classList.add("undone");
        const label = checkpoint.querySelector(".checkpoint-state");
        if (label) {
          label.textContent = texts.checkpointUndone(seq);
        }
      }
    }
  }

  /** Marks the element of `seq` as shadowed by a checkpoint (or live again). */
  markShadowed(seq, shadowed) {
    const node = this.bySeq.get(seq);
    if (node) {
      node.classList.toggle("shadowed", shadowed);
      node.title = shadowed ? texts.shadowedNote : "";
    }
  }

  userMessage(message, seq) {
    const source = message.source || { kind: "user" };
    const text = textOf(message.content);
    let item;
    if (typeof message.resends === "string") {
      // A client's retry of a message no turn answered: the model reads the first
      // copy only, so this one is a note, not a second bubble.
      item = el("li", "row resent", texts.resent);
    } else if (source.kind === "user") {
      item = el("li", "message user");
      item.append(el("div", "who", texts.you), el("div", "text", text));
      const images = attachments(message.content);
      if (images) {
        item.append(images);
      }
    } else if (source.kind === "compact-checkpoint") {
      item = el("li", "row checkpoint");
      const details = el("details");
      const summary = el("summary");
      summary.append(el("span", "", texts.checkpoint), el("span", "checkpoint-state", ""));
      // Opening the row loads what it replaced beside its text, and its Undo (CC-EXT-3).
      // The detail shows the checkpoint text in its own column, so the row's copy of
      // it is hidden while the detail is drawn (the text is shown once).
      const own = el("pre", "text checkpoint-text", text);
      const detail = el("div", "checkpoint-detail");
      details.append(summary, own, detail);
      details.addEventListener("toggle", async () => {
        if (details.open && this.on.checkpoint) {
          own.hidden = (await this.on.checkpoint(seq, detail)) === true;
        }
      });
      item.append(details, this.detailsLink(seq));
    } else {
      item = el("li", "row notice");
      const details = el("details");
      details.append(el("summary", "", texts.notice(source.plugin || source.kind)), el("pre", "text", text));
      item.append(details, this.detailsLink(seq));
    }
    item.dataset.seq = String(seq);
    this.bySeq.set(seq, item);
    this.append(item);
  }

  /** A notice's *details* link: opens the prompts tab at the page holding `seq` (UI-3). */
  detailsLink(seq) {
    const link = el("button", "link notice-details", texts.noticeDetails);
    link.type = "button";
    link.addEventListener("click", () => {
      if (this.on.details) {
        this.on.details(seq);
      }
    });
    return link;
  }

  /** A *fork here* button: a new session holding everything up to `seq` (a turn's end). */
  forkButton(seq) {
    const button = el("button", "link fork", texts.forkHere);
    button.type = "button";
    button.dataset.seq = String(seq);
    button.addEventListener("click", () => {
      if (this.on.fork) {
        this.on.fork(seq);
      }
    });
    return button;
  }

  /** The live item of a model call, created when its first chunk arrives. */
  liveItem(callId) {
    let live = this.live.get(callId);
    if (!live) {
      const item = el("li", "message assistant streaming");
      item.append(el("div", "who", texts.assistant));
      live = { item, blocks: new Map() };
      this.live.set(callId, live);
      this.append(item);
    }
    return live;
  }

  delta(data) {
    const chunk = data && data.chunk;
    if (!chunk || typeof chunk.type !== "string") {
      return;
    }
    if (chunk.type !== "text-delta" && chunk.type !== "reasoning-delta") {
      return;
    }
    const live = this.liveItem(data.callId);
    const key = `${chunk.type}:${chunk.index}`;
    let target = live.blocks.get(key);
    if (!target) {
      if (chunk.type === "reasoning-delta") {
        const details = el("details", "reasoning");
        details.append(el("summary", "", texts.reasoning));
        target = el("pre", "text");
        details.append(target);
        live.item.append(details);
      } else {
        target = el("div", "text");
        live.item.append(target);
      }
      live.blocks.set(key, target);
    }
    target.textContent += typeof chunk.text === "string" ? chunk.text : "";
  }

  dropLive(callId) {
    const live = this.live.get(callId);
    if (live) {
      live.item.remove();
      this.live.delete(callId);
    }
  }

  assistantMessage(body, seq) {
    const live = this.live.get(body.call_id);
    let item;
    if (live) {
      item = live.item;
      this.live.delete(body.call_id);
      item.replaceChildren();
      item.classList.remove("streaming");
    } else {
      item = el("li", "message assistant");
      this.append(item);
    }
    item.append(el("div", "who", texts.assistant));
    const content = (body.message && body.message.content) || [];
    for (const block of Array.isArray(content) ? content : []) {
      if (!block || typeof block !== "object") {
        continue;
      }
      if (block.type === "reasoning" && block.text) {
        const details = el("details", "reasoning");
        details.append(el("summary", "", texts.reasoning), el("pre", "text", block.text));
        item.append(details);
      } else if (block.type === "text") {
        item.append(el("div", "text", block.text || ""));
      } else if (block.type === "tool-call") {
        item.append(this.toolRow(block.id, block.name, block.arguments, true));
      }
    }
    if (body.interrupted) {
      item.classList.add("interrupted");
      item.append(el("div", "stop", texts.interrupted));
    }
    item.dataset.seq = String(seq);
    this.bySeq.set(seq, item);
    this.lastAssistant.set(body.turn, item);
  }

  /** The row of tool call `callId`, made on first sight; `detached`: the caller places it. */
  toolRow(callId, name, args, detached = false) {
    let tool = this.tools.get(callId);
    if (!tool) {
      const row = el("details", "tool");
      const summary = el("summary");
      summary.append(el("span", "tool-name", name || texts.tool), el("span", "tool-args", shortArgs(args)));
      const status = el("span", "tool-status", texts.toolPending);
      summary.append(status);
      const argsBlock = el("pre", "tool-full");
      try {
        argsBlock.textContent = JSON.stringify(args, null, 2);
      } catch {
        argsBlock.textContent = String(args);
      }
      const result = el("pre", "tool-result");
      row.append(summary, argsBlock, result);
      tool = { row, status, result };
      this.tools.set(callId, tool);
      if (!detached) {
        const item = el("li", "row");
        item.append(row);
        this.append(item);
      }
    }
    return tool.row;
  }

  toolResult(body, seq) {
    const blocks = (body.message && body.message.content) || [];
    for (const block of Array.isArray(blocks) ? blocks : []) {
      if (!block || block.type !== "tool-result") {
        continue;
      }
      const tool = this.tools.get(block.call_id);
      if (!tool) {
        this.toolRow(block.call_id, block.name, null);
      }
      const found = this.tools.get(block.call_id);
      found.result.textContent = textOf(block.content);
      const failed = block.is_error || Boolean(body.error);
      found.status.textContent = failed ? texts.toolFailed : "";
      found.row.classList.toggle("failed", failed);
      if (typeof seq === "number") {
        this.bySeq.set(seq, found.row);
      }
    }
  }

  /** Drops every answer still streaming (its turn ended, or will never be stored). */
  dropStreaming() {
    for (const callId of [...this.live.keys()]) {
      this.dropLive(callId);
    }
  }

  turnEnd(body, seq) {
    this.dropStreaming();
    const item = this.lastAssistant.get(body.turn);
    // A fork keeps whole turns (the engine refuses a boundary inside one): the turn's
    // last answer offers a fork at its end.
    if (item && typeof seq === "number") {
      item.append(this.forkButton(seq));
    }
    const note = stopNote(body.reason);
    if (note === null) {
      return;
    }
    if (item) {
      item.classList.add("stopped");
      for (const old of item.querySelectorAll(".stop")) {
        old.remove();
      }
      item.insertBefore(el("div", "stop", note), item.querySelector(".fork"));
    } else {
      const row = el("li", "row stop-row");
      row.append(el("div", "stop", note));
      if (typeof seq === "number") {
        row.append(this.forkButton(seq));
      }
      this.append(row);
    }
  }
}
