# A long conversation through the official openai Python SDK (gateway.rs
# `gw_7_a_long_conversation_through_the_python_sdk_...`): TURNS user turns of filler,
# every third one asking for a client tool round. Prints one JSON object: per
# request, the session, the x-ccare-compacted header and the answer. Any error the
# client sees raises, so the script exits non-zero.
import json, os, openai

client = openai.OpenAI(base_url=os.environ["GW_BASE"] + "/v1", api_key=os.environ["GW_TOKEN"], max_retries=0)
tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
filler = "The quick brown fox jumps over the lazy dog while the parser reads its input. " * 100
history = [{"role": "system", "content": "be brief"}]
seen = []


def ask():
    raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=history, tools=tools)
    answer = raw.parse()
    message = answer.choices[0].message
    seen.append({"session": raw.headers["x-ccare-session"], "compacted": raw.headers.get("x-ccare-compacted"),
                 "content": message.content, "finish": answer.choices[0].finish_reason})
    return message


for turn in range(int(os.environ["TURNS"])):
    call = " CALL" if turn % 3 == 1 else ""
    history.append({"role": "user", "content": f"Turn {turn}{call}: {filler}"})
    message = ask()
    history.append(message.model_dump(exclude_none=True))
    for tool_call in message.tool_calls or []:
        history.append({"role": "tool", "tool_call_id": tool_call.id, "content": "sunny"})
    if message.tool_calls:
        history.append(ask().model_dump(exclude_none=True))
print(json.dumps(seen))
