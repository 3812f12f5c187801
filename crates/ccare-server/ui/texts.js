// The UI's texts, in one place, English and Chinese (issue 16 item 8). The locale is
// the one remembered in localStorage (the header's switch sets it), else the server's
// `[agent] locale` (GET /api/info), else the browser's `navigator.language` (zh* →
// Chinese) when the server cannot be asked. `texts` is the chosen table; the page
// reloads on a switch, so every part is drawn again in the new language. The choice
// needs the server's answer, so this module awaits it at the top level: every module
// importing `texts` runs once the language is known.

/** The storage key of the chosen locale. */
const KEY = "ccare.locale";

/** The locales the UI has tables for. */
export const LOCALES = ["en", "zh"];

const en = {
  newSession: "New session",
  noSession: "No session open",
  noSessions: "No sessions yet",
  sessionsLabel: "Sessions",
  conversationLabel: "Conversation",
  message: "Message",
  placeholder: "Message (Enter sends, Shift+Enter for a new line)",
  send: "Send",
  steer: "Steer",
  cancel: "Cancel",
  language: "Language",
  running: "running",
  idle: "idle",
  awaitingTools: "awaiting tool results",
  you: "You",
  resent: "You sent the message again (a retry); the model reads it once.",
  image: "Image",
  imageAt: (address) => `Image: ${address}`,
  assistant: "Assistant",
  reasoning: "Reasoning",
  tool: "Tool",
  toolPending: "running…",
  toolFailed: "failed",
  notice: (plugin) => `Notice from ${plugin}`,
  checkpoint: "Compaction checkpoint",
  events: (count) => `${count} events`,
  interrupted: "interrupted",
  stoppedBy: {
    user: "stopped by you",
    streamWatch: (reason) => (reason ? `stopped by stream watch: ${reason}` : "stopped by stream watch"),
    plugin: (plugin, reason) => (reason ? `stopped by ${plugin}: ${reason}` : `stopped by ${plugin}`),
    shutdown: "stopped: the server shut down",
    timeout: "stopped: a deadline passed",
  },
  blocked: (by, detail) => `blocked by ${by}: ${detail}`,
  failed: (code, message) => `failed: ${code}${message ? ` — ${message}` : ""}`,
  maxTokens: "cut at the output limit",
  repaired: "interrupted: the process ended or a store error stopped this turn",
  streamClosed: "fetch: the event stream closed; reopen the session to retry",
  fenced: (error) =>
    `This session stopped after a store error (${error}). Sending a message reopens it from the store.`,
  contextLoad: "Context load",
  fatigue: "Fatigue",
  wakefulness: "Wakefulness",
  uncalibrated: "uncalibrated",
  noMetric: "—",
  sampleRecorded: (seq) => `no live sample: as recorded at seq ${seq}`,
  sampleBoundary: "no live sample: as at the last request boundary",
  sampleNone: "no live sample and none recorded",
  levels: {
    normal: "normal",
    elevated: "elevated",
    high: "high",
    "very-high": "very-high",
    low: "low",
    unknown: "unknown",
  },
  // UI-2
  panelTitle: "Budget & maintenance",
  showPanel: "Show budget & maintenance",
  hidePanel: "Hide budget & maintenance",
  refresh: "Refresh",
  overview: "Overview",
  fullInput: "Full input",
  hardLimit: "Hard limit",
  utilisation: "Utilisation",
  noCapacity: "no capacity known",
  tokens: (n) => `${n} tokens`,
  details: "Pricing and retention",
  purpose: "Route purpose",
  capacity: "Capacity (C)",
  capacitySource: { "context-window": "model context window", "context-budget-tokens": "policy budget" },
  physicalWindow: "Physical window",
  policyCapacity: "Policy capacity",
  calibration: "Calibration",
  textScale: "Text scale (sample)",
  softThreshold: "Soft threshold (S)",
  releaseTarget: "Release target (L)",
  tail: "Tail",
  outputReserve: "Output reserve",
  safetyReserve: "Safety and burst reserve",
  phase: "Phase",
  armed: "Automatic maintenance armed",
  yes: "yes",
  no: "no",
  injected: "Injected in the last turn",
  categories: "Next request by part",
  categoryNames: {
    system: "system prompt",
    guidance: "context-care guidance",
    tools: "tools",
    messages: "history (incl. checkpoints)",
    "instructions:base": "base instructions",
    "instructions:file": "instructions file",
    "instructions:agents-md": "AGENTS.md",
  },
  noBreakdown: "No breakdown of the next request yet",
  breakdownPart: (label, tokens) => `${label}: ${tokens} tokens`,
  breakdownHard: (tokens) => `hard limit: ${tokens} tokens`,
  maintenance: "Maintenance",
  noActions: "No maintenance yet",
  action: "Action",
  status: "Status",
  time: "Time",
  inputChange: "Input before → after",
  running_: "running",
  reason: "Reason",
  error: "Error",
  operation: "Operation",
  replacements: "Replaced ranges",
  rawJson: "Raw JSON",
  previous: "Previous",
  next: "Next",
  pageOf: (from, to, total) => `${from}–${to} of ${total}`,
  findSeq: "Find seq",
  find: "Find",
  searching: "Searching…",
  noActionAt: (seq) => `No action covers seq ${seq}`,
  actionAt: (seq, op) => `Seq ${seq} is covered by ${op}`,
  // UI-7
  chartTitle: "Load over the session",
  chartPct: "Fatigue and wakefulness (%)",
  chartTokens: "Input tokens",
  chartEmpty: "No request boundary yet",
  chartLegend: { fatigue: "fatigue", wakefulness: "wakefulness", input: "input", hard: "hard limit", soft: "soft threshold", gap: "uncalibrated", op: "maintenance" },
  chartPoint: (index, input, fatigue, wakefulness) =>
    `request ${index}: ${input} tokens, fatigue ${fatigue}, wakefulness ${wakefulness}`,
  chartOp: (kind, outcome, before, after) => `${kind} (${outcome}): ${before} → ${after}`,
  truncated: "earlier boundaries were trimmed from the journal",
  // Fork and export
  export: "Export",
  forkHere: "Fork here",
  forked: (from, seq) => `Forked from ${from} after seq ${seq}`,
  exported: (name, bytes) => `Exported ${name} (${bytes} bytes)`,
  // UI-3
  promptsTitle: "Prompts",
  noticeDetails: "Details",
  seekSeq: "Go to seq",
  go: "Go",
  noPrompts: "No prompts yet",
  noPromptAt: (seq) => `No prompt was logged at seq ${seq}`,
  placement: { surface: "in the history", "request-only": "one request only", checkpoint: "checkpoint" },
  publisher: "Source (plugin)",
  sourceKind: "Kind",
  trigger: "Trigger",
  fromRules: "Rules",
  seq: "Seq",
  turn: "Turn",
  call: "Provider call",
  onSurface: "In the chat",
  replacedByCheckpoint: "no: replaced by a checkpoint",
  copy: "Copy",
  copied: (seq) => `Copied the body of seq ${seq}`,
  selectedForCopy: "The body is selected: copy it with Ctrl+C",
  locate: "Locate",
  located: (seq) => `Shown in the chat: seq ${seq}`,
  noChatNode: (seq) => `No chat node for seq ${seq}`,
  noChatNodeReplaced: (seq) => `No chat node for seq ${seq}: a checkpoint replaced it`,
  // UI-4
  rulesTitle: "Session rules",
  searchRules: "Search rules",
  noRules: "No rules",
  noRuleMatches: "No rule matches the search",
  revision: (n) => `revision ${n}`,
  storageError: (message) => `storage: ${message}`,
  rulesLoadFailed: (message) => `Loading the rules failed: ${message}`,
  ruleSource: (plugin, source) => `${plugin} · ${source}`,
  paused: "paused",
  active: "active",
  pause: "Pause",
  resume: "Resume",
  resetRule: "Reset to default",
  readOnly: "Read-only: this source cannot be changed here",
  actionOn: "on",
  actionOff: "off",
  defaultOn: "default on",
  defaultOff: "default off",
  executor: "has an executor",
  noExecutor: "no executor",
  requires: (list) => `requires ${list}`,
  saving: "Saving…",
  saved: "Saved",
  changedElsewhere: "Changed elsewhere, reloaded",
  saveFailed: (message) => `Not saved: ${message}`,
  // CC-EXT-3
  detailLoading: "Loading the detail…",
  noOperation: (seq) => `No maintenance action wrote the checkpoint at seq ${seq}`,
  replacedEvents: (from, to) => `Replaced (seq ${from}–${to})`,
  checkpointText: "Checkpoint text",
  summaryUsage: "Summary call usage",
  usageOf: (input, cacheRead, cacheWrite, output) => `input ${input}, cache read ${cacheRead}, cache write ${cacheWrite}, output ${output}`,
  coverage: "Coverage",
  coverageOf: (leaves, parents, depth) => `${leaves} events, ${parents} earlier checkpoints, depth ${depth}`,
  undoneAt: "Undone",
  undo: "Undo",
  undoing: "Undoing…",
  undone: (op) => `Undid ${op}: the replaced messages are live again`,
  checkpointUndone: (seq) => ` · undone (seq ${seq})`,
  shadowedNote: "Replaced by a checkpoint: not in the next request",
  undoRefused: {
    ALREADY_UNDONE: "it was already undone",
    UNDO_OVER_SOFT_THRESHOLD: "the restored request would go over the soft threshold",
    UNDO_NOT_LATEST: "a later compaction must be undone first",
    SESSION_BUSY: "the session is busy; try again when the turn ends",
  },
  undoRefusedLine: (why, message) => `Undo refused: ${why} — ${message}`,
  undoFailed: (line) => `Undo failed: ${line}`,
};

const zh = {
  newSession: "新建会话",
  noSession: "未打开会话",
  noSessions: "还没有会话",
  sessionsLabel: "会话",
  conversationLabel: "对话",
  message: "消息",
  placeholder: "消息（Enter 发送，Shift+Enter 换行）",
  send: "发送",
  steer: "引导",
  cancel: "取消",
  language: "语言",
  running: "运行中",
  idle: "空闲",
  awaitingTools: "等待工具结果",
  you: "你",
  resent: "你再次发送了这条消息（重试）；模型只读取一次。",
  image: "图片",
  imageAt: (address) => `图片：${address}`,
  assistant: "助手",
  reasoning: "推理",
  tool: "工具",
  toolPending: "运行中…",
  toolFailed: "失败",
  notice: (plugin) => `来自 ${plugin} 的通知`,
  checkpoint: "压缩检查点",
  events: (count) => `${count} 个事件`,
  interrupted: "已中断",
  stoppedBy: {
    user: "已由你停止",
    streamWatch: (reason) => (reason ? `已被流监视停止：${reason}` : "已被流监视停止"),
    plugin: (plugin, reason) => (reason ? `已被 ${plugin} 停止：${reason}` : `已被 ${plugin} 停止`),
    shutdown: "已停止：服务器已关闭",
    timeout: "已停止：超过期限",
  },
  blocked: (by, detail) => `被 ${by} 阻止：${detail}`,
  failed: (code, message) => `失败：${code}${message ? ` — ${message}` : ""}`,
  maxTokens: "在输出上限处截断",
  repaired: "已中断：进程结束或存储出错，本轮未完成",
  streamClosed: "fetch：事件流已关闭；重新打开会话以重试",
  fenced: (error) => `存储出错，本会话已停止（${error}）。发送一条消息即可从存储重新打开它。`,
  contextLoad: "上下文负载",
  fatigue: "疲劳度",
  wakefulness: "清醒度",
  uncalibrated: "未校准",
  noMetric: "—",
  sampleRecorded: (seq) => `无实时采样：按 seq ${seq} 处的记录`,
  sampleBoundary: "无实时采样：按上一次请求边界",
  sampleNone: "无实时采样，也无记录",
  levels: {
    normal: "正常",
    elevated: "偏高",
    high: "高",
    "very-high": "很高",
    low: "低",
    unknown: "未知",
  },
  panelTitle: "预算与维护",
  showPanel: "显示预算与维护",
  hidePanel: "隐藏预算与维护",
  refresh: "刷新",
  overview: "概览",
  fullInput: "完整输入",
  hardLimit: "硬上限",
  utilisation: "使用率",
  noCapacity: "容量未知",
  tokens: (n) => `${n} 个令牌`,
  details: "计价与保留",
  purpose: "路由用途",
  capacity: "容量 (C)",
  capacitySource: { "context-window": "模型上下文窗口", "context-budget-tokens": "策略预算" },
  physicalWindow: "物理窗口",
  policyCapacity: "策略容量",
  calibration: "校准",
  textScale: "文本比例（样本）",
  softThreshold: "软阈值 (S)",
  releaseTarget: "释放目标 (L)",
  tail: "尾部保留",
  outputReserve: "输出预留",
  safetyReserve: "安全与突发预留",
  phase: "阶段",
  armed: "自动维护已启用",
  yes: "是",
  no: "否",
  injected: "上一轮注入",
  categories: "下一请求的组成",
  categoryNames: {
    system: "系统提示",
    guidance: "上下文维护指引",
    tools: "工具",
    messages: "历史（含检查点）",
    "instructions:base": "基础指令",
    "instructions:file": "指令文件",
    "instructions:agents-md": "AGENTS.md",
  },
  noBreakdown: "还没有下一请求的组成",
  breakdownPart: (label, tokens) => `${label}：${tokens} 个令牌`,
  breakdownHard: (tokens) => `硬上限：${tokens} 个令牌`,
  maintenance: "维护",
  noActions: "还没有维护记录",
  action: "操作",
  status: "状态",
  time: "时间",
  inputChange: "输入 前 → 后",
  running_: "进行中",
  reason: "原因",
  error: "错误",
  operation: "操作编号",
  replacements: "替换的范围",
  rawJson: "原始 JSON",
  previous: "上一页",
  next: "下一页",
  pageOf: (from, to, total) => `第 ${from}–${to} 条，共 ${total} 条`,
  findSeq: "查找序号",
  find: "查找",
  searching: "正在查找…",
  noActionAt: (seq) => `没有维护操作覆盖序号 ${seq}`,
  actionAt: (seq, op) => `序号 ${seq} 由 ${op} 覆盖`,
  chartTitle: "会话负载走势",
  chartPct: "疲劳度与清醒度（%）",
  chartTokens: "输入令牌",
  chartEmpty: "还没有请求边界",
  chartLegend: { fatigue: "疲劳度", wakefulness: "清醒度", input: "输入", hard: "硬上限", soft: "软阈值", gap: "未校准", op: "维护" },
  chartPoint: (index, input, fatigue, wakefulness) =>
    `请求 ${index}：${input} 个令牌，疲劳度 ${fatigue}，清醒度 ${wakefulness}`,
  chartOp: (kind, outcome, before, after) => `${kind}（${outcome}）：${before} → ${after}`,
  truncated: "更早的请求边界已从日志中裁剪",
  export: "导出",
  forkHere: "从这里分叉",
  forked: (from, seq) => `已从 ${from} 的 seq ${seq} 之后分叉`,
  exported: (name, bytes) => `已导出 ${name}（${bytes} 字节）`,
  promptsTitle: "提示",
  noticeDetails: "详情",
  seekSeq: "跳到 seq",
  go: "跳转",
  noPrompts: "还没有提示",
  noPromptAt: (seq) => `seq ${seq} 处没有记录提示`,
  placement: { surface: "在历史中", "request-only": "仅一次请求", checkpoint: "检查点" },
  publisher: "来源（插件）",
  sourceKind: "类型",
  trigger: "触发",
  fromRules: "规则",
  seq: "序号",
  turn: "轮次",
  call: "模型调用",
  onSurface: "在对话中",
  replacedByCheckpoint: "否：已被检查点替换",
  copy: "复制",
  copied: (seq) => `已复制 seq ${seq} 的正文`,
  selectedForCopy: "正文已选中：按 Ctrl+C 复制",
  locate: "定位",
  located: (seq) => `已在对话中显示：seq ${seq}`,
  noChatNode: (seq) => `seq ${seq} 没有对话节点`,
  noChatNodeReplaced: (seq) => `seq ${seq} 没有对话节点：已被检查点替换`,
  rulesTitle: "会话规则",
  searchRules: "搜索规则",
  noRules: "没有规则",
  noRuleMatches: "没有匹配的规则",
  revision: (n) => `修订 ${n}`,
  storageError: (message) => `存储：${message}`,
  rulesLoadFailed: (message) => `加载规则失败：${message}`,
  ruleSource: (plugin, source) => `${plugin} · ${source}`,
  paused: "已暂停",
  active: "生效中",
  pause: "暂停",
  resume: "恢复",
  resetRule: "恢复默认",
  readOnly: "只读：此来源不能在这里修改",
  actionOn: "开",
  actionOff: "关",
  defaultOn: "默认开",
  defaultOff: "默认关",
  executor: "有执行器",
  noExecutor: "没有执行器",
  requires: (list) => `需要 ${list}`,
  saving: "保存中…",
  saved: "已保存",
  changedElsewhere: "已在别处修改，已重新加载",
  saveFailed: (message) => `未保存：${message}`,
  // CC-EXT-3
  detailLoading: "正在加载详情…",
  noOperation: (seq) => `没有维护操作写入 seq ${seq} 处的检查点`,
  replacedEvents: (from, to) => `被替换的内容（seq ${from}–${to}）`,
  checkpointText: "检查点文本",
  summaryUsage: "摘要调用用量",
  usageOf: (input, cacheRead, cacheWrite, output) => `输入 ${input}，缓存读取 ${cacheRead}，缓存写入 ${cacheWrite}，输出 ${output}`,
  coverage: "覆盖范围",
  coverageOf: (leaves, parents, depth) => `${leaves} 个事件，${parents} 个先前检查点，深度 ${depth}`,
  undoneAt: "已撤销",
  undo: "撤销",
  undoing: "正在撤销…",
  undone: (op) => `已撤销 ${op}：被替换的消息重新生效`,
  checkpointUndone: (seq) => ` · 已撤销（seq ${seq}）`,
  shadowedNote: "已被检查点替换：不在下一次请求中",
  undoRefused: {
    ALREADY_UNDONE: "该操作已被撤销",
    UNDO_OVER_SOFT_THRESHOLD: "恢复后的请求会超过软阈值",
    UNDO_NOT_LATEST: "必须先撤销之后的压缩",
    SESSION_BUSY: "会话正忙，请在本轮结束后重试",
  },
  undoRefusedLine: (why, message) => `撤销被拒绝：${why} — ${message}`,
  undoFailed: (line) => `撤销失败：${line}`,
};

const TABLES = { en, zh };

/** The remembered locale, or null. */
function remembered() {
  try {
    const stored = window.localStorage.getItem(KEY);
    return stored && LOCALES.includes(stored) ? stored : null;
  } catch {
    return null;
  }
}

/** The server's configured locale (`GET /api/info`), or null when it cannot be had. */
async function configured() {
  try {
    const response = await fetch("/api/info", { credentials: "same-origin" });
    if (!response.ok) {
      return null;
    }
    const info = await response.json();
    return info && LOCALES.includes(info.locale) ? info.locale : null;
  } catch {
    return null;
  }
}

/** The remembered locale, else the server's, else the browser's. */
async function chosen() {
  const stored = remembered();
  if (stored) {
    return stored;
  }
  const server = await configured();
  if (server) {
    return server;
  }
  const language = (navigator.language || "en").toLowerCase();
  return language.startsWith("zh") ? "zh" : "en";
}

/** The UI's locale: `en` or `zh`. */
export const locale = await chosen();

/** The texts of the UI's locale. */
export const texts = TABLES[locale];

/** Remembers `next` as the UI's locale and reloads the page in it. */
export function switchLocale(next) {
  if (!LOCALES.includes(next) || next === locale) {
    return;
  }
  try {
    window.localStorage.setItem(KEY, next);
  } catch {
    // Storage refused (private mode): the switch holds for this page only.
  }
  window.location.reload();
}

/** Fills every `[data-text]` element's text, `[data-label]`'s aria-label and `[data-placeholder]`'s placeholder from the table. */
export function applyStatic(root = document) {
  document.documentElement.lang = locale === "zh" ? "zh-CN" : "en";
  for (const node of root.querySelectorAll("[data-text]")) {
    const value = texts[node.dataset.text];
    if (typeof value === "string") {
      node.textContent = value;
    }
  }
  for (const node of root.querySelectorAll("[data-label]")) {
    const value = texts[node.dataset.label];
    if (typeof value === "string") {
      node.setAttribute("aria-label", value);
    }
  }
  for (const node of root.querySelectorAll("[data-placeholder]")) {
    const value = texts[node.dataset.placeholder];
    if (typeof value === "string") {
      node.setAttribute("placeholder", value);
    }
  }
}

/** A token count with thousands separators: 12,345. */
export function grouped(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}
