// The `openai` Node SDK through the gateway (gateway.rs `gw_1_the_openai_node_sdk_...`):
// prints one JSON object with what the client saw. Attempts are counted with a
// wrapping `fetch`, so a retry the SDK makes shows.
const OpenAI = require("openai");

const attempts = [];
const client = new OpenAI({
  baseURL: process.env.GW_BASE + "/v1",
  apiKey: process.env.GW_TOKEN,
  maxRetries: 2,
  fetch: (url, init) => {
    attempts.push(String(url));
    return fetch(url, init);
  },
});

async function main() {
  const out = {};
  out.version = require("openai/version").VERSION;
  const history = [
    { role: "system", content: "be brief" },
    { role: "user", content: "hi" },
  ];
  const first = await client.chat.completions
    .create({ model: "fake/model", messages: history })
    .withResponse();
  out.first = {
    session: first.response.headers.get("x-ccare-session"),
    content: first.data.choices[0].message.content,
    finish: first.data.choices[0].finish_reason,
    usage: first.data.usage.total_tokens,
    object: first.data.object,
  };

  history.push({ role: "assistant", content: first.data.choices[0].message.content });
  history.push({ role: "user", content: "more" });
  const second = await client.chat.completions
    .create({
      model: "fake/model",
      messages: history,
      stream: true,
      stream_options: { include_usage: true },
    })
    .withResponse();
  const pieces = [];
  let finish = null;
  let last = null;
  for await (const chunk of second.data) {
    if (chunk.choices.length > 0) {
      pieces.push(chunk.choices[0].delta.content || "");
      finish = chunk.choices[0].finish_reason || finish;
    }
    last = chunk;
  }
  out.second = {
    session: second.response.headers.get("x-ccare-session"),
    content: pieces.join(""),
    finish,
    lastChoices: last.choices,
    lastUsage: last.usage && last.usage.total_tokens,
  };

  await client.chat.completions.create({
    model: "fake/model",
    user: "k",
    messages: [{ role: "user", content: "keyed" }],
  });
  let before = attempts.length;
  try {
    await client.chat.completions.create({
      model: "fake/model",
      user: "k",
      messages: [
        { role: "user", content: "keyed" },
        { role: "tool", tool_call_id: "never_sent", content: "x" },
      ],
    });
    out.refused = null;
  } catch (error) {
    if (!(error instanceof OpenAI.APIError)) throw error;
    out.refused = { status: error.status, code: error.code, attempts: attempts.length - before };
  }

  before = attempts.length;
  const retried = await client.chat.completions.create({
    model: "fake/model",
    messages: [{ role: "user", content: "retry me" }],
  });
  out.retried = { content: retried.choices[0].message.content, attempts: attempts.length - before };

  const tools = [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const messages = [{ role: "user", content: "weather in Paris and Rome?" }];
  const calls = new Map();
  let toolFinish = null;
  const stream = await client.chat.completions.create({
    model: "fake/model",
    messages,
    tools,
    stream: true,
  });
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) continue;
    for (const call of chunk.choices[0].delta.tool_calls || []) {
      const known = calls.get(call.index) || { id: "", name: "", arguments: "" };
      known.id = call.id || known.id;
      known.name += (call.function && call.function.name) || "";
      known.arguments += (call.function && call.function.arguments) || "";
      calls.set(call.index, known);
    }
    toolFinish = chunk.choices[0].finish_reason || toolFinish;
  }
  const indexes = [...calls.keys()].sort((a, b) => a - b);
  const ordered = indexes.map((index) => calls.get(index));
  messages.push({
    role: "assistant",
    content: null,
    tool_calls: ordered.map((call) => ({
      id: call.id,
      type: "function",
      function: { name: call.name, arguments: call.arguments },
    })),
  });
  for (const call of ordered) {
    messages.push({
      role: "tool",
      tool_call_id: call.id,
      content: "sunny in " + JSON.parse(call.arguments).city,
    });
  }
  const answer = await client.chat.completions
    .create({ model: "fake/model", messages, tools })
    .withResponse();
  out.tools = {
    indexes,
    calls: ordered,
    finish: toolFinish,
    answer: answer.data.choices[0].message.content,
    session: answer.response.headers.get("x-ccare-session"),
  };
  console.log(JSON.stringify(out));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
