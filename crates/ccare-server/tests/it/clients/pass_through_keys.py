# The official openai Python SDK with its own API keys through the gateway
# (gateway_keys.rs `gw_1_the_openai_python_sdk_sends_its_own_key_upstream`), with
# `[gateway] pass_through_keys = true`: two clients, keys GW_KEY_A and GW_KEY_B, send
# the same question; A streams a follow-up; B's next request is refused upstream (401),
# which the SDK raises without retrying. Prints one JSON object.
import json, os

import openai
from openai import OpenAI

BASE = os.environ["GW_BASE"] + "/v1"
QUESTION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
out = {}

a = OpenAI(base_url=BASE, api_key=os.environ["GW_KEY_A"])
b = OpenAI(base_url=BASE, api_key=os.environ["GW_KEY_B"])
for name, client in (("a", a), ("b", b)):
    raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=QUESTION)
    answer = raw.parse()
    out[name] = {"session": raw.headers["x-ccare-session"], "content": answer.choices[0].message.content}

follow = QUESTION + [{"role": "assistant", "content": out["a"]["content"]},
                     {"role": "user", "content": "and then?"}]
with a.chat.completions.with_streaming_response.create(model="fake/model", messages=follow,
                                                       stream=True) as response:
    text = "".join(chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices)
    out["a_next"] = {"session": response.headers["x-ccare-session"], "content": text}

try:
    b.chat.completions.create(model="fake/model", messages=follow)
    out["b_refused"] = None
except openai.AuthenticationError as error:
    out["b_refused"] = {"status": error.status_code, "code": error.code}
print(json.dumps(out))
