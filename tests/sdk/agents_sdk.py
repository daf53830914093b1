"""POST /v1/responses through an agent framework: the OpenAI Agents SDK.

Run by t/081-responses.t: argv is the base URL.  Prints one TAP-style
line per check.  An agent with a function tool and a Pydantic output
type, on the tiny random model: its first turn must call the tool
(tool_choice "required"), the SDK runs the tool and sends its output
back as a function_call_output item with the call, and the next turn
(tool_choice back to auto) answers in the output type's JSON schema.
A logit_bias on <|im_end|> ends each answer as soon as the grammar
allows it, so that every response is complete: the SDK refuses an
incomplete one.  Run whole, then streamed.
"""

import asyncio
import sys

from openai import AsyncOpenAI
from pydantic import BaseModel

from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from agents.items import (MessageOutputItem, ToolCallItem,
                          ToolCallOutputItem)


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


class Weather(BaseModel):
    city: str
    degrees: int


calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return "sunny, 21 degrees"


def agent(client):
    return Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIResponsesModel(model="serving", openai_client=client),
        model_settings=ModelSettings(
            tool_choice="required", max_tokens=200, temperature=0,
            extra_body={"logit_bias": {"3002": 100}}),
        tools=[get_weather],
        output_type=Weather)


def kinds(items):
    return [type(i) for i in items]


async def main():
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=sys.argv[1], api_key="unused",
                         max_retries=0, timeout=120)

    result = await Runner.run(agent(client), "Weather in Paris?",
                              max_turns=4)
    check(len(calls) == 1, "run: the tool ran once")
    k = kinds(result.new_items)
    check(ToolCallItem in k and ToolCallOutputItem in k,
          "run: a tool call and its output")
    check(k.index(ToolCallItem) < k.index(ToolCallOutputItem),
          "run: the call, then its output")
    check(isinstance(result.final_output, Weather),
          "run: the final output is the output type")
    check(len(result.raw_responses) == 2, "run: two responses")
    check(all(r.usage.output_tokens > 0 for r in result.raw_responses),
          "run: usage on each")

    calls.clear()
    streamed = Runner.run_streamed(agent(client), "Weather in Rome?",
                                   max_turns=4)
    types = []
    async for ev in streamed.stream_events():
        types.append(ev.type)
    check(len(calls) == 1, "run_streamed: the tool ran once")
    check("raw_response_event" in types and "run_item_stream_event" in types,
          "run_streamed: raw and item events")
    check(isinstance(streamed.final_output, Weather),
          "run_streamed: the final output is the output type")
    check(MessageOutputItem in kinds(streamed.new_items),
          "run_streamed: a message item")


if __name__ == "__main__":
    asyncio.run(main())
