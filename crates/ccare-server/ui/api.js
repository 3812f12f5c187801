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

  /** One line for people: "http 409 SESSION_BUSY: …". */
  describe() {
    const head = this.status === null ? this.kind : `${this.kind} ${this.status}`;
    return this.code ? `${head} ${this.code}: ${this.message}` : `${head}: ${this.message}`;
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
