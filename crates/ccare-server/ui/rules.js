// UI-4: the session rules tab — each controls source (plugin, read-only or not), its
// rules (pause / resume, reset to default) and their actions (a toggle each, with the
// default, the executor's availability, what it requires and the decision's reason),
// filtered by the search box. A change is a PATCH against the snapshot's revision;
// "saved" shows only once its 200 (the durable ACK) came back; a failed save stays shown
// until a save succeeds (polling never clears it); a 409 says "changed elsewhere,
// reloaded" and reloads the snapshot. The tab reloads every 5 s while the page is
// visible. Text from the server goes in with textContent (UI-5).

import { patchRules, rulesOf } from "./api.js";
import { el } from "./chat.js";
import { texts } from "./texts.js";

/** How often the tab reloads while it is shown and the page visible (UI-4). */
export const POLL_MS = 5000;

function byId(id) {
  return document.getElementById(id);
}

function show(node, text) {
  node.textContent = text || "";
  node.hidden = !text;
}

/** The rules tab of session `id`. */
export class Rules {
  constructor(id) {
    this.id = id;
    this.snapshot = null;
    this.closed = false;
    this.saving = false;
    this.shown = false;
    this.timer = null;
    this.generation = 0;
    this.search = byId("rules-search");
    this.onSearch = () => this.render();
    this.onVisible = () => {
      if (!document.hidden && this.shown) {
        this.load();
      }
    };
    this.search.value = "";
    this.search.addEventListener("input", this.onSearch);
    document.addEventListener("visibilitychange", this.onVisible);
    show(byId("rules-error"), null);
    show(byId("rules-status"), null);
    byId("rules").replaceChildren();
    byId("rules-meta").textContent = "";
  }

  /** Shows or hides the tab: polling runs only while it is shown. */
  setShown(shown) {
    this.shown = shown;
    clearInterval(this.timer);
    this.timer = null;
    if (shown && !this.closed) {
      this.load();
      this.timer = setInterval(() => {
        if (!document.hidden && !this.saving) {
          this.load();
        }
      }, POLL_MS);
    }
  }

  refresh() {
    this.load();
  }

  /** Reloads the snapshot; a load answered after a newer one started is dropped. */
  async load() {
    const generation = ++this.generation;
    try {
      const snapshot = await rulesOf(this.id);
      if (this.closed || generation !== this.generation) {
        return;
      }
      this.snapshot = snapshot;
      this.render();
    } catch (failure) {
      if (!this.closed && generation === this.generation) {
        // A load error shows in the meta line; a save error in #rules-error stays.
        byId("rules-meta").textContent = texts.rulesLoadFailed(failure.describe ? failure.describe() : String(failure));
      }
    }
  }

  /** One change: `change` is the patch without revision, source and rule. */
  async save(sourceId, ruleId, change) {
    if (!this.snapshot || this.saving) {
      return;
    }
    this.saving = true;
    this.generation++;
    show(byId("rules-status"), texts.saving);
    this.render();
    const body = { revision: this.snapshot.revision, sourceId, ruleId, ...change };
    try {
      const after = await patchRules(this.id, body);
      if (this.closed) {
        return;
      }
      this.snapshot = after;
      show(byId("rules-error"), null);
      show(byId("rules-status"), texts.saved);
    } catch (failure) {
      if (this.closed) {
        return;
      }
      show(byId("rules-status"), null);
      if (failure.status === 409) {
        show(byId("rules-error"), texts.changedElsewhere);
        this.saving = false;
        await this.load();
        return;
      }
      show(byId("rules-error"), texts.saveFailed(failure.describe ? failure.describe() : String(failure)));
    } finally {
      this.saving = false;
    }
    this.render();
  }

  /** Draws the snapshot, keeping keyboard focus on the same control. */
  render() {
    const snapshot = this.snapshot;
    if (!snapshot || this.closed) {
      return;
    }
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.control : undefined;
    const needle = this.search.value.trim().toLowerCase();
    const items = [];
    for (const source of snapshot.sources) {
      const plugin = source.plugin || source.sourceId;
      for (const rule of source.rules) {
        const haystack = [source.sourceId, plugin, rule.id, ...rule.actions.map((action) => action.id)].join(" ").toLowerCase();
        if (needle && !haystack.includes(needle)) {
          continue;
        }
        items.push(this.ruleItem(source, rule));
      }
    }
    if (items.length === 0) {
      items.push(el("li", "empty", needle ? texts.noRuleMatches : texts.noRules));
    }
    byId("rules").replaceChildren(...items);
    const meta = [texts.revision(snapshot.revision)];
    if (snapshot.storageError) {
      meta.push(texts.storageError(snapshot.storageError));
    }
    byId("rules-meta").textContent = meta.join(" · ");
    if (focused) {
      const again = byId("rules").querySelector(`[data-control="${CSS.escape(focused)}"]`);
      if (again) {
        again.focus();
      }
    }
  }

  ruleItem(source, rule) {
    const key = `${source.sourceId}/${rule.id}`;
    const item = el("li", rule.paused ? "rule paused" : "rule");
    item.dataset.rule = key;
    const head = el("div", "rule-head");
    head.append(
      el("span", "rule-id", rule.id),
      el("span", "rule-source", texts.ruleSource(source.plugin || "–", source.sourceId)),
      el("span", "rule-state", rule.paused ? texts.paused : texts.active),
    );
    const locked = source.readOnly || this.saving;
    const pause = el("button", "rule-pause", rule.paused ? texts.resume : texts.pause);
    pause.type = "button";
    pause.dataset.control = `${key}#pause`;
    pause.disabled = locked;
    pause.addEventListener("click", () => this.save(source.sourceId, rule.id, { paused: !rule.paused }));
    const reset = el("button", "rule-reset", texts.resetRule);
    reset.type = "button";
    reset.dataset.control = `${key}#reset`;
    reset.disabled = locked;
    reset.addEventListener("click", () => this.save(source.sourceId, rule.id, { reset: true }));
    const buttons = el("div", "rule-buttons");
    buttons.append(pause, reset);
    item.append(head, buttons);
    if (source.readOnly) {
      item.append(el("p", "hint", texts.readOnly));
    }
    const actions = el("ul", "rule-actions");
    for (const action of rule.actions) {
      const row = el("li", "rule-action");
      row.dataset.action = action.id;
      const label = el("label");
      const box = el("input");
      box.type = "checkbox";
      box.checked = action.selected;
      box.disabled = locked;
      box.dataset.control = `${key}#${action.id}`;
      box.addEventListener("change", () => this.save(source.sourceId, rule.id, { actionId: action.id, enabled: box.checked }));
      label.append(box, el("span", "action-id", action.id));
      const facts = [
        action.enabled ? texts.actionOn : texts.actionOff,
        action.defaultEnabled ? texts.defaultOn : texts.defaultOff,
        action.available ? texts.executor : texts.noExecutor,
      ];
      if (action.requires.length > 0) {
        facts.push(texts.requires(action.requires.join(", ")));
      }
      row.append(label, el("span", "action-facts", facts.join(" · ")), el("span", "action-reason", action.reason));
      actions.append(row);
    }
    item.append(actions);
    return item;
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    this.search.removeEventListener("input", this.onSearch);
    document.removeEventListener("visibilitychange", this.onVisible);
  }
}
