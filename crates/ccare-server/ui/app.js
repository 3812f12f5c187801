// The app: the sessions list (newest first, "new session"), the open session's
// conversation over its event stream, the input box (prompt, or steer while a turn
// runs), cancel, the UI-1 indicator, the UI-2 budget & maintenance panel with the
// UI-7 chart (refreshed when a turn goes idle), and the language switch. The open
// session is kept in the URL (#/s/<id>), so a reload comes back to it.

import { cancelTurn, createSession, eventsOf, exportSession, forkSession, listSessions, operationOfCheckpoint, sendMessage, sessionOf } from "./api.js";
import { Conversation, el } from "./chat.js";
import { Chart } from "./chart.js";
import { showDetail } from "./detail.js";
import { Indicator } from "./indicator.js";
import { Panel } from "./panel.js";
import { Prompts } from "./prompts.js";
import { Rules } from "./rules.js";
import { applyStatic, locale, switchLocale, texts } from "./texts.js";

const dom = {
  sessions: document.getElementById("sessions"),
  sessionsError: document.getElementById("sessions-error"),
  newSession: document.getElementById("new-session"),
  title: document.getElementById("session-title"),
  state: document.getElementById("session-state"),
  chatError: document.getElementById("chat-error"),
  conversation: document.getElementById("conversation"),
  composer: document.getElementById("composer"),
  input: document.getElementById("input"),
  send: document.getElementById("send"),
  cancel: document.getElementById("cancel"),
  panel: document.getElementById("panel"),
  panelToggle: document.getElementById("panel-toggle"),
  panelBody: document.getElementById("panel-body"),
  panelRefresh: document.getElementById("panel-refresh"),
  actionsPrev: document.getElementById("actions-prev"),
  actionsNext: document.getElementById("actions-next"),
  locale: document.getElementById("locale"),
  exportButton: document.getElementById("export"),
  chatStatus: document.getElementById("chat-status"),
  panelTitle: document.getElementById("panel-title"),
  tabs: [...document.querySelectorAll("#panel .tab")],
  promptsPrev: document.getElementById("prompts-prev"),
  promptsNext: document.getElementById("prompts-next"),
  promptsSeek: document.getElementById("prompts-seek"),
  promptsSeq: document.getElementById("prompts-seq"),
  actionsSeek: document.getElementById("actions-seek"),
  actionsSeq: document.getElementById("actions-seq"),
};

/** The panel's tab shown: budget, prompts or rules. */
let view = "budget";

/** The open session: {id, source, conversation, indicator, panel, chart, state}. */
let open = null;

function showError(node, failure) {
  if (failure) {
    node.textContent = failure.describe ? failure.describe() : String(failure);
    node.hidden = false;
  } else {
    node.hidden = true;
  }
}

async function refreshSessions() {
  let sessions;
  try {
    sessions = await listSessions();
  } catch (failure) {
    showError(dom.sessionsError, failure);
    return;
  }
  showError(dom.sessionsError, null);
  const items = sessions.map((session) => {
    const item = el("li");
    const button = el("button", "session");
    button.type = "button";
    button.dataset.id = session.id;
    button.append(el("span", "session-id", session.id), el("span", "session-meta", `${session.createdAt} · ${texts.events(session.events)}`));
    if (open && open.id === session.id) {
      button.setAttribute("aria-current", "true");
    }
    button.addEventListener("click", () => openSession(session.id));
    item.append(button);
    return item;
  });
  if (items.length === 0) {
    items.push(el("li", "empty", texts.noSessions));
  }
  dom.sessions.replaceChildren(...items);
}

function setState(state) {
  if (!open) {
    return;
  }
  open.state = state;
  const label = { running: texts.running, idle: texts.idle, "awaiting-tools": texts.awaitingTools }[state] || state;
  dom.state.textContent = label;
  dom.state.dataset.state = state;
  const busy = state !== "idle";
  dom.send.textContent = busy ? texts.steer : texts.send;
  dom.cancel.disabled = !busy;
}

/**
 * Says in the chat when a store error fenced the open session `id` (H-STORE-6): the
 * server takes no more of its turn until a new message reopens it. Clears what it
 * said once the session is writable again; other errors are left as they are.
 */
async function showFence(id) {
  let detail;
  try {
    detail = await sessionOf(id);
  } catch {
    return;
  }
  if (!open || open.id !== id) {
    return;
  }
  if (typeof detail.fence === "string") {
    open.fenced = true;
    // What streamed of the fenced turn's answer was never stored.
    open.conversation.dropStreaming();
    showError(dom.chatError, { describe: () => texts.fenced(detail.fence) });
  } else if (open.fenced) {
    open.fenced = false;
    showError(dom.chatError, null);
  }
}

function closeSession() {
  if (open) {
    open.source.close();
    open.indicator.close();
    open.panel.close();
    open.chart.close();
    open.prompts.close();
    open.rules.close();
    open = null;
  }
}

/**
 * Opens session `id`; `after`: `panelOffset` (the maintenance page to show),
 * `focusOperation` (the maintenance row that takes the focus once drawn), `keepFocus`
 * (leave the focus to the caller instead of the input box).
 */
function openSession(id, after = {}) {
  closeSession();
  if (window.location.hash !== `#/s/${id}`) {
    window.location.hash = `#/s/${id}`;
  }
  dom.title.textContent = id;
  dom.conversation.replaceChildren();
  showError(dom.chatError, null);
  dom.composer.hidden = false;
  dom.exportButton.hidden = false;
  showStatus(null);
  document.getElementById("actions-status").hidden = true;
  const indicator = new Indicator(id);
  const panel = new Panel(id, undone);
  if (typeof after.panelOffset === "number") {
    panel.offset = after.panelOffset;
  }
  if (typeof after.focusOperation === "string") {
    panel.focusOperation = after.focusOperation;
  }
  const chart = new Chart(id);
  const prompts = new Prompts(id);
  const rules = new Rules(id);
  dom.panel.hidden = false;
  const conversation = new Conversation(dom.conversation, {
    boundary: () => indicator.refresh(),
    state: setState,
    idle: () => {
      showFence(id);
      refreshSessions();
      panel.refresh();
      chart.refresh();
      if (view === "prompts") {
        prompts.refresh();
      }
    },
    details: (seq) => {
      showView("prompts", false);
      prompts.showSeq(seq);
    },
    fork,
    checkpoint: (seq, node) => openCheckpoint(id, seq, node),
  });
  const source = eventsOf(id);
  open = { id, source, conversation, indicator, panel, chart, prompts, rules, state: "idle", fenced: false };
  setState("idle");
  showFence(id);
  const listen = (type) =>
    source.addEventListener(type, (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      conversation.handle(type, data);
    });
  for (const type of [
    "delta",
    "idle",
    "awaiting-tools",
    "user/message",
    "assistant/message",
    "assistant/attempt",
    "tool/call",
    "tool/result",
    "turn/start",
    "turn/end",
    "request/header",
    "request/context",
    "compaction/undo",
  ]) {
    listen(type);
  }
  source.addEventListener("open", () => showError(dom.chatError, null));
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      showError(dom.chatError, { describe: () => texts.streamClosed });
    }
  });
  indicator.refresh();
  panel.refresh();
  chart.refresh();
  showView(view);
  refreshSessions();
  if (!after.keepFocus) {
    dom.input.focus();
  }
}

/**
 * Draws the detail of the maintenance action that wrote checkpoint `seq` into `node`
 * (CC-EXT-3); resolves to whether it was drawn.
 */
async function openCheckpoint(id, seq, node) {
  let op;
  try {
    op = await operationOfCheckpoint(id, seq);
  } catch (failure) {
    node.replaceChildren(el("p", "error", failure.describe ? failure.describe() : String(failure)));
    return false;
  }
  if (op === null) {
    node.replaceChildren(el("p", "empty", texts.noOperation(seq)));
    return false;
  }
  return showDetail(node, id, op, (undoneOp, done) => undone(undoneOp, done));
}

/**
 * After an undo is durable: reloads the open session (the shadowed messages are live
 * again) and says so. The focus goes where the undo was asked: back to the
 * maintenance row (same page) when it came from the panel (`where.panelOffset`), else
 * to the line saying it was undone (the chat's checkpoint row is redrawn).
 */
function undone(op, _done, where = {}) {
  if (!open) {
    return;
  }
  if (typeof where.panelOffset === "number") {
    openSession(open.id, { panelOffset: where.panelOffset, focusOperation: op, keepFocus: true });
    showStatus(texts.undone(op));
  } else {
    openSession(open.id, { keepFocus: true });
    showStatus(texts.undone(op));
    dom.chatStatus.focus();
  }
}

/** A one-line note under the chat's head (fork and export results); null hides it. */
function showStatus(text) {
  dom.chatStatus.textContent = text || "";
  dom.chatStatus.hidden = !text;
}

/** Forks the open session after `seq` and opens the new one. */
async function fork(seq) {
  if (!open) {
    return;
  }
  const from = open.id;
  try {
    const session = await forkSession(from, seq);
    openSession(session.id);
    showStatus(texts.forked(from, seq));
  } catch (failure) {
    showError(dom.chatError, failure);
  }
}

/** Downloads the open session's JSONL through a Blob (the cookie authenticates the fetch). */
async function exportOpen() {
  if (!open) {
    return;
  }
  const id = open.id;
  try {
    const blob = await exportSession(id);
    const url = URL.createObjectURL(blob);
    const link = document.createElement("a");
    link.href = url;
    link.download = `${id}.jsonl`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    showError(dom.chatError, null);
    showStatus(texts.exported(`${id}.jsonl`, blob.size));
  } catch (failure) {
    showError(dom.chatError, failure);
  }
}

/** Shows the panel tab `name` (budget, prompts or rules); `load`: refresh what it shows. */
function showView(name, load = true) {
  view = name;
  for (const tab of dom.tabs) {
    const selected = tab.dataset.view === name;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    document.getElementById(`view-${tab.dataset.view}`).hidden = !selected;
    if (selected) {
      dom.panelTitle.textContent = tab.textContent;
    }
  }
  if (!open) {
    return;
  }
  open.rules.setShown(name === "rules");
  if (name === "prompts" && load) {
    open.prompts.refresh();
  }
}

async function send() {
  if (!open) {
    return;
  }
  const text = dom.input.value;
  if (text.trim() === "") {
    return;
  }
  const mode = open.state === "idle" ? "prompt" : "steer";
  dom.send.disabled = true;
  try {
    await sendMessage(open.id, text, mode);
    dom.input.value = "";
    showError(dom.chatError, null);
  } catch (failure) {
    showError(dom.chatError, failure);
  } finally {
    dom.send.disabled = false;
    dom.input.focus();
  }
}

dom.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

dom.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});

dom.cancel.addEventListener("click", async () => {
  if (!open) {
    return;
  }
  try {
    await cancelTurn(open.id);
    showError(dom.chatError, null);
  } catch (failure) {
    showError(dom.chatError, failure);
  }
});

dom.newSession.addEventListener("click", async () => {
  try {
    const session = await createSession();
    showError(dom.sessionsError, null);
    openSession(session.id);
  } catch (failure) {
    showError(dom.sessionsError, failure);
  }
});

function fromHash() {
  const match = /^#\/s\/(.+)$/.exec(window.location.hash);
  if (match && (!open || open.id !== match[1])) {
    openSession(decodeURIComponent(match[1]));
  }
}

/** Shows or hides the panel's body (collapsed by default at phone width). */
function setPanelOpen(expanded) {
  dom.panelBody.hidden = !expanded;
  dom.panelToggle.setAttribute("aria-expanded", String(expanded));
  dom.panelToggle.textContent = expanded ? texts.hidePanel : texts.showPanel;
}

dom.panelToggle.addEventListener("click", () => {
  setPanelOpen(dom.panelBody.hidden);
});

dom.panelRefresh.addEventListener("click", () => {
  if (!open) {
    return;
  }
  if (view === "prompts") {
    open.prompts.refresh();
  } else if (view === "rules") {
    open.rules.refresh();
  } else {
    open.panel.refresh();
    open.chart.refresh();
  }
});

for (const tab of dom.tabs) {
  tab.addEventListener("click", () => showView(tab.dataset.view));
  // Arrow keys move between the tabs (the ARIA tabs pattern).
  tab.addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) {
      return;
    }
    const index = (dom.tabs.indexOf(tab) + step + dom.tabs.length) % dom.tabs.length;
    dom.tabs[index].focus();
    showView(dom.tabs[index].dataset.view);
  });
}

dom.promptsPrev.addEventListener("click", () => open && open.prompts.page(-1));
dom.promptsNext.addEventListener("click", () => open && open.prompts.page(1));
dom.promptsSeek.addEventListener("submit", (event) => {
  event.preventDefault();
  const seq = Number.parseInt(dom.promptsSeq.value, 10);
  if (open && Number.isInteger(seq) && seq >= 0) {
    open.prompts.showSeq(seq);
  }
});
dom.exportButton.addEventListener("click", exportOpen);

dom.actionsSeek.addEventListener("submit", (event) => {
  event.preventDefault();
  const seq = Number.parseInt(dom.actionsSeq.value, 10);
  if (open && Number.isInteger(seq) && seq >= 0) {
    open.panel.seekSeq(seq);
  }
});
dom.actionsPrev.addEventListener("click", () => open && open.panel.page(-1));
dom.actionsNext.addEventListener("click", () => open && open.panel.page(1));

dom.locale.value = locale;
dom.locale.addEventListener("change", () => switchLocale(dom.locale.value));

window.addEventListener("hashchange", fromHash);
applyStatic();
const phone = window.matchMedia("(max-width: 700px)");
setPanelOpen(!phone.matches);
// Back at desktop width the toggle is gone: the panel shows again.
phone.addEventListener("change", () => setPanelOpen(!phone.matches));
dom.title.textContent = texts.noSession;
refreshSessions();
fromHash();
