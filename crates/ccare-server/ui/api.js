// The sessions API over fetch, cookie-authenticated. Every failure is an ApiError
// classified as UI-5 asks (fetch | body | http | json | validation), so the page can
// say what went wrong instead of an unclassified "Failed to fetch" (KD-5).

/** A failed API call: `kind` is fetch, body, http, json or validation. */
export class ApiError extends Error {
  constructor(kind, message, status = null, code = null) {
    super(message);
    this.kind = kind;
    this.status = status;
    this.code = code;
  }

  /** One line for people: "http 409 SESSION_BUSY: …" (a message that starts with its code does not repeat it). */
  describe() {
    const head = this.status === null ? this.kind : `${this.kind} ${this.status}`;
    if (!this.code) {
      return `${head}: ${this.message}`;
    }
    const prefix = `${this.code}: `;
    const message = this.message.startsWith(prefix) ? this.message.slice(prefix.length) : this.message;
    return `${head} ${this.code}: ${message}`;
  }
}

/** Calls `method path` with an optional JSON body; resolves to the decoded JSON (or null for an empty body). */
export async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (failure) {
    throw new ApiError("fetch", `the server could not be reached (${failure.message})`);
  }
  let text;
  try {
    text = await response.text();
  } catch (failure) {
    throw new ApiError("body", `reading the answer failed (${failure.message})`, response.status);
  }
  let json = null;
  if (text.length > 0) {
    try {
      json = JSON.parse(text);
    } catch (failure) {
      if (response.ok) {
        throw new ApiError("json", `the answer is not JSON (${failure.message})`, response.status);
      }
    }
  }
  if (!response.ok) {
    if (response.status === 401) {
      window.location.assign("/login");
    }
    const code = json && typeof json.error === "string" ? json.error : null;
    const message = json && typeof json.message === "string" ? json.message : response.statusText;
    throw new ApiError("http", message, response.status, code);
  }
  return json;
}

/** Checks that `value` is an object with each of `fields`; throws a validation error naming the first missing one. */
export function expectFields(what, value, fields) {
  if (value === null || typeof value !== "object") {
    throw new ApiError("validation", `${what}: expected an object`);
  }
  for (const field of fields) {
    if (!(field in value)) {
      throw new ApiError("validation", `${what}: missing ${field}`);
    }
  }
  return value;
}

/** GET /api/sessions: one page, newest first. */
export async function listSessions() {
  const page = expectFields("sessions", await call("GET", "/api/sessions?limit=50"), ["sessions"]);
  return page.sessions;
}

/** GET /api/sessions/{id}: the session's detail (its `fence` names a store error). */
export async function sessionOf(id) {
  return expectFields("session", await call("GET", `/api/sessions/${encodeURIComponent(id)}`), ["id"]);
}

/** POST /api/sessions: a new session's summary. */
export async function createSession() {
  return expectFields("new session", await call("POST", "/api/sessions", {}), ["id"]);
}

/** POST /api/sessions/{id}/messages with `mode` prompt or steer. */
export function sendMessage(id, text, mode) {
  return call("POST", `/api/sessions/${encodeURIComponent(id)}/messages`, { text, mode });
}

/** POST /api/sessions/{id}/cancel. */
export function cancelTurn(id) {
  return call("POST", `/api/sessions/${encodeURIComponent(id)}/cancel`);
}

/** GET /api/sessions/{id}/context: the whole context report, validated. */
export async function contextReportOf(id) {
  const report = await call("GET", `/api/sessions/${encodeURIComponent(id)}/context`);
  expectFields("context", report, ["metrics", "inputTokens", "budget", "assessment", "calibration"]);
  expectFields("context metrics", report.metrics, ["fatigue", "fatigueValue", "wakefulness", "wakefulnessValue"]);
  if (report.budget !== null) {
    expectFields("context budget", report.budget, ["hardInput", "softInput", "releaseTarget", "capacity"]);
  }
  return report;
}

/** GET /api/sessions/{id}/context: a fresh context-care sample's metrics. */
export async function contextOf(id) {
  return (await contextReportOf(id)).metrics;
}

/**
 * The session's recorded sample (CC-MET-5's fallback): `currentState` of
 * GET /context-care/actions, which reads the log without opening the session — this
 * process's last boundary sample, else the `contextCareNumeric` projection of the
 * latest status notice (`source` boundary, log or none).
 */
export async function recordedSampleOf(id) {
  const query = new URLSearchParams({ sessionId: id, limit: "1", offset: "0" });
  const page = expectFields("maintenance actions", await call("GET", `/context-care/actions?${query}`), ["currentState"]);
  return expectFields("current state", page.currentState, ["source", "fatigue", "fatigueValue", "wakefulness", "wakefulnessValue", "sampledSeq"]);
}

/** GET /api/sessions/{id}/context/series: one point per request boundary and the operations (UI-7). */
export async function seriesOf(id) {
  const series = await call("GET", `/api/sessions/${encodeURIComponent(id)}/context/series`);
  expectFields("context series", series, ["points", "operations"]);
  if (!Array.isArray(series.points) || !Array.isArray(series.operations)) {
    throw new ApiError("validation", "context series: points and operations must be lists");
  }
  for (const point of series.points) {
    expectFields("series point", point, ["inputTokens", "fatiguePct", "wakefulnessPct", "budget"]);
  }
  return series;
}

/** GET /context-care/actions: one page of the session's maintenance records (UI-2). */
export async function actionsOf(id, limit, offset) {
  const query = new URLSearchParams({ sessionId: id, limit: String(limit), offset: String(offset) });
  const page = await call("GET", `/context-care/actions?${query}`);
  expectFields("maintenance actions", page, ["actions", "total", "offset", "nextOffset"]);
  if (!Array.isArray(page.actions)) {
    throw new ApiError("validation", "maintenance actions: actions must be a list");
  }
  for (const record of page.actions) {
    expectFields("maintenance record", record, ["at", "data"]);
  }
  return page;
}

/** The event stream of a session (API-3), cookie-authenticated. */
export function eventsOf(id) {
  return new EventSource(`/api/sessions/${encodeURIComponent(id)}/events`);
}

/** GET /context-care/rules: a session's rule controls (UI-4), validated. */
export async function rulesOf(id) {
  const query = new URLSearchParams({ sessionId: id });
  return validRules(await call("GET", `/context-care/rules?${query}`));
}

/** PATCH /context-care/rules: one change against `body.revision`; resolves to the snapshot after it, once durable. */
export async function patchRules(id, body) {
  const query = new URLSearchParams({ sessionId: id });
  return validRules(await call("PATCH", `/context-care/rules?${query}`, body));
}

function validRules(snapshot) {
  expectFields("rules", snapshot, ["sessionId", "revision", "sources"]);
  if (!Array.isArray(snapshot.sources)) {
    throw new ApiError("validation", "rules: sources must be a list");
  }
  for (const source of snapshot.sources) {
    expectFields("rules source", source, ["sourceId", "readOnly", "rules"]);
    if (!Array.isArray(source.rules)) {
      throw new ApiError("validation", "rules source: rules must be a list");
    }
    for (const rule of source.rules) {
      expectFields("rule", rule, ["id", "paused", "actions"]);
      if (!Array.isArray(rule.actions)) {
        throw new ApiError("validation", "rule: actions must be a list");
      }
      for (const action of rule.actions) {
        expectFields("rule action", action, ["id", "defaultEnabled", "available", "requires", "selected", "enabled", "reason"]);
      }
    }
  }
  return snapshot;
}

/** GET /context-care/prompts: one page of a session's prompts with their provenance (UI-3); `seq` selects the page holding it. */
export async function promptsOf(id, limit, { offset = 0, seq = null } = {}) {
  const query = new URLSearchParams({ sessionId: id, limit: String(limit) });
  if (seq !== null) {
    query.set("seq", String(seq));
  } else {
    query.set("offset", String(offset));
  }
  const page = await call("GET", `/context-care/prompts?${query}`);
  expectFields("prompts", page, ["prompts", "total", "offset", "nextOffset", "selectedFound"]);
  if (!Array.isArray(page.prompts)) {
    throw new ApiError("validation", "prompts: prompts must be a list");
  }
  for (const entry of page.prompts) {
    expectFields("prompt", entry, ["seq", "at", "placement", "live", "kind", "body", "rules"]);
  }
  return page;
}

/** POST /api/sessions/{id}/fork at `atSeq`: the new session's summary. */
export async function forkSession(id, atSeq) {
  return expectFields("forked session", await call("POST", `/api/sessions/${encodeURIComponent(id)}/fork`, { atSeq }), ["id"]);
}

/** GET /api/sessions/{id}/export: the session's JSONL as a Blob (cookie auth). */
export async function exportSession(id) {
  let response;
  try {
    response = await fetch(`/api/sessions/${encodeURIComponent(id)}/export`, { credentials: "same-origin" });
  } catch (failure) {
    throw new ApiError("fetch", `the server could not be reached (${failure.message})`);
  }
  if (!response.ok) {
    let json = null;
    try {
      json = JSON.parse(await response.text());
    } catch {
      json = null;
    }
    if (response.status === 401) {
      window.location.assign("/login");
    }
    const code = json && typeof json.error === "string" ? json.error : null;
    const message = json && typeof json.message === "string" ? json.message : response.statusText;
    throw new ApiError("http", message, response.status, code);
  }
  try {
    return await response.blob();
  } catch (failure) {
    throw new ApiError("body", `reading the export failed (${failure.message})`, response.status);
  }
}

/** GET /context-care/actions/{op}: one maintenance action in detail (CC-EXT-3), validated. */
export async function actionDetailOf(id, op) {
  const query = new URLSearchParams({ sessionId: id });
  const detail = await call("GET", `/context-care/actions/${encodeURIComponent(op)}?${query}`);
  expectFields("action detail", detail, ["operationId", "replacements", "undoneAtSeq"]);
  if (!Array.isArray(detail.replacements)) {
    throw new ApiError("validation", "action detail: replacements must be a list");
  }
  for (const range of detail.replacements) {
    expectFields("replaced range", range, ["newSeq", "shadowed", "checkpoint", "live"]);
    if (!Array.isArray(range.shadowed)) {
      throw new ApiError("validation", "replaced range: shadowed must be a list");
    }
  }
  return detail;
}

/** POST /context-care/actions/{op}/undo: resolves to the outcome once durable; a refusal is an http 409 ApiError. */
export function undoAction(id, op) {
  const query = new URLSearchParams({ sessionId: id });
  return call("POST", `/context-care/actions/${encodeURIComponent(op)}/undo?${query}`);
}

/** The operation id of the maintenance action whose replace node is `seq`, or null. */
export async function operationOfCheckpoint(id, seq) {
  let offset = 0;
  for (;;) {
    const page = await actionsOf(id, 200, offset);
    for (const record of page.actions) {
      const data = record.data && typeof record.data === "object" ? record.data : {};
      const ranges = Array.isArray(data.replacements) ? data.replacements : [];
      if (typeof data.operationId === "string" && ranges.some((range) => range && range.newSeq === seq)) {
        return data.operationId;
      }
    }
    if (typeof page.nextOffset !== "number" || page.nextOffset <= offset) {
      return null;
    }
    offset = page.nextOffset;
  }
}

/** Whether maintenance record `data` covers `seq`: a replaced range holds it, or it is the range's new node. */
function covers(data, seq) {
  const ranges = Array.isArray(data.replacements) ? data.replacements : [];
  return ranges.some(
    (range) =>
      range &&
      typeof range === "object" &&
      (range.newSeq === seq ||
        (typeof range.oldStartSeq === "number" && typeof range.oldEndSeq === "number" && range.oldStartSeq <= seq && seq <= range.oldEndSeq)),
  );
}

/**
 * The first maintenance action, in the list's order, whose replaced ranges contain
 * `seq` or whose replace node is `seq`: `{ operationId, index }` (`index`: its place in
 * the whole list, for the page holding it), or null (issue 16 item 2: search by seq).
 */
export async function actionCoveringSeq(id, seq) {
  let offset = 0;
  for (;;) {
    const page = await actionsOf(id, 200, offset);
    const at = page.actions.findIndex((record) => {
      const data = record.data && typeof record.data === "object" ? record.data : {};
      return typeof data.operationId === "string" && covers(data, seq);
    });
    if (at >= 0) {
      return { operationId: page.actions[at].data.operationId, index: page.offset + at };
    }
    if (typeof page.nextOffset !== "number" || page.nextOffset <= offset) {
      return null;
    }
    offset = page.nextOffset;
  }
}
