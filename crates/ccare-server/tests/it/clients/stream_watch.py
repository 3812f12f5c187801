# A looping answer through the official openai Python SDK (gateway_watch.rs
# `gw_5_the_python_sdk_gets_one_answer_through_an_abort_and_resume`): one streamed
# request with include_usage, then one plain request in a new conversation; the
# gateway's stream watch aborts both first upstream answers and resumes them. Prints
# one JSON object of what the client saw. Any error the client sees raises, so the
# script exits non-zero.
import json, os, openai

client = openai.OpenAI(base_url=os.environ["GW_BASE"] + "/v1", api_key=os.environ["GW_TOKEN"], max_retries=0)
out = {}

raw = client.chat.completions.with_raw_response.create(
    model="fake/model", messages=[{"role": "user", "content": "write it"}], stream=True,
    stream_options={"include_usage": True})
ids, roles, pieces, finishes, usage, usage_choices, chunks = set(), [], [], [], None, None, 0
for chunk in raw.parse():
    chunks += 1
    ids.add(chunk.id)
    if chunk.usage is not None:
        usage, usage_choices = chunk.usage.model_dump(exclude_none=True), len(chunk.choices)
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        pieces.append(choice.delta.content or "")
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
out["streamed"] = {"session": raw.headers["x-ccare-session"], "status": raw.status_code, "ids": sorted(ids),
                   "roles": roles, "content": "".join(pieces), "finishes": finishes, "usage": usage,
                   "usage_choices": usage_choices, "chunks": chunks}

raw = client.chat.completions.with_raw_response.create(
    model="fake/model", messages=[{"role": "user", "content": "write it again"}])
answer = raw.parse()
out["plain"] = {"session": raw.headers["x-ccare-session"], "status": raw.status_code, "id": answer.id,
                "object": answer.object, "choices": len(answer.choices),
                "content": answer.choices[0].message.content, "finish": answer.choices[0].finish_reason,
                "usage": answer.usage.model_dump(exclude_none=True)}
print(json.dumps(out))
