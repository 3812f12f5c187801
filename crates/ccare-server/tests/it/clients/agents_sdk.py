# The OpenAI Agents SDK through the gateway (gateway_clients.rs
# `gw_4_the_openai_agents_sdk_runs_a_tool_agent_through_the_gateway`): chat completions
# (not the Responses API), tracing off, the default client pointed at GW_BASE with the
# server token. One agent with a function tool and `tool_choice="required"` (which the
# SDK resets once the tool ran) runs twice: a question, then the first run's items plus
# a follow-up. Prints one JSON object: each run's final output, the
# city of each tool invocation in order, every gateway response's status and
# x-ccare-session, and how many items the second run ends with. Any error the SDK
# raises exits non-zero.
import asyncio, json, os

from agents import (Agent, ModelSettings, Runner, function_tool, set_default_openai_api, set_default_openai_client,
                    set_tracing_disabled)
from openai import AsyncOpenAI, DefaultAsyncHttpxClient

TEMPERATURES = {"Paris": 20, "Rome": 25, "Oslo": 8}
ran = []
responses = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    ran.append(city)
    return f"sunny, {TEMPERATURES.get(city, 0)}C in {city}"


async def record(response):
    responses.append({"path": response.request.url.path, "status": response.status_code,
                      "session": response.headers.get("x-ccare-session")})


async def main():
    http = DefaultAsyncHttpxClient(event_hooks={"response": [record]})
    client = AsyncOpenAI(base_url=os.environ["GW_BASE"] + "/v1", api_key=os.environ["GW_TOKEN"],
                         http_client=http, max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)
    agent = Agent(name="Forecaster", instructions="Answer weather questions; use get_weather.",
                  tools=[get_weather], model=os.environ["GW_MODEL"],
                  model_settings=ModelSettings(tool_choice="required"))
    first = await Runner.run(agent, "What is the weather in Paris?")
    history = first.to_input_list() + [{"role": "user", "content": "And in Rome and Oslo?"}]
    second = await Runner.run(agent, history)
    print(json.dumps({"outputs": [first.final_output, second.final_output], "ran": ran,
                      "responses": responses, "items": len(second.to_input_list())}))


asyncio.run(main())
