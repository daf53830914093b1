"""A tool round trip against a running ngx_http_vlm_module.

Run by t/067-tool-history.t: argv is the base URL and the parts to run.
"openai": the OpenAI SDK asks with tools and tool_choice "required", puts
the answer's message object (content null, tool_calls) and the tools'
results back into the history and asks again, streamed and not; a
malformed tool message is a BadRequestError naming the field.
"langchain": LangChain's ChatOpenAI with_structured_output (function
calling, JSON mode and JSON schema) with a Pydantic model, and an
agent-style loop: bind_tools, run the tool, a ToolMessage back, the final
answer.  The model of the fixture has random weights: what is checked is
the protocol, and that constrained answers validate.  Prints one
TAP-style line per check.
"""

import json
import sys
from typing import Literal

import openai
import pydantic
from openai import OpenAI


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        }}},
]


def sdk_round(client):
    for stream in (False, True):
        label = "streamed" if stream else "not streamed"
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        r = client.chat.completions.create(
            model="serving", messages=messages, temperature=1,
            max_tokens=120, tools=TOOLS, tool_choice="required")
        c = r.choices[0]
        calls = c.message.tool_calls or []
        check(c.finish_reason == "tool_calls" and len(calls) >= 1
              and c.message.content is None,
              "openai %s: the first answer calls a tool" % label)

        # the SDK's own message object, as its documentation does it
        messages.append(c.message)
        for tc in calls:
            args = json.loads(tc.function.arguments)
            messages.append({"role": "tool", "tool_call_id": tc.id,
                             "content": json.dumps(
                                 {"city": args.get("city"), "temp": 18})})

        kw = dict(model="serving", messages=messages, temperature=0,
                  max_tokens=8, tools=TOOLS)
        if stream:
            text, finish, usage = "", None, None
            for chunk in client.chat.completions.create(
                    stream=True, stream_options={"include_usage": True},
                    **kw):
                if chunk.usage:
                    usage = chunk.usage
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
        else:
            r2 = client.chat.completions.create(**kw)
            finish, usage = r2.choices[0].finish_reason, r2.usage
        check(finish in ("stop", "length", "tool_calls"),
              "openai %s: the second request, with the tool calls and "
              "results, is answered (%s)" % (label, finish))
        check(usage is not None
              and usage.prompt_tokens > r.usage.prompt_tokens + 10,
              "openai %s: the history reaches the prompt (%s > %d)"
              % (label, usage and usage.prompt_tokens,
                 r.usage.prompt_tokens))

    # a tool message without its tool_call_id
    try:
        client.chat.completions.create(
            model="serving", max_tokens=1, messages=[
                {"role": "user", "content": "hi"},
                {"role": "tool", "content": "18 C"}])
        check(False, "openai: a tool message without tool_call_id fails")
    except openai.BadRequestError as e:
        check(e.status_code == 400
              and e.body.get("param") == "messages[1].tool_call_id",
              "openai: a tool message without tool_call_id is a 400 "
              "naming it")


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20)
    unit: Literal["celsius", "fahrenheit"]


def langchain(base):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="serving", base_url=base, api_key="unused",
                     temperature=1, max_tokens=120, max_retries=0,
                     timeout=120)

    for method in ("function_calling", "json_schema"):
        good = 0
        for _ in range(3):
            try:
                out = llm.with_structured_output(
                    Weather, method=method).invoke("Weather in Paris?")
                good += isinstance(out, Weather)
            except Exception as e:  # noqa: BLE001
                print("# %s: %s" % (method, e))
        check(good == 3, "langchain with_structured_output(method=%r): 3 "
              "Weather objects" % method)

    # JSON mode constrains to a JSON object, not to the model's fields:
    # the raw answer must be an object, the parse may fail on a random model
    good = 0
    for _ in range(3):
        try:
            out = llm.with_structured_output(
                Weather, method="json_mode", include_raw=True).invoke(
                    "Weather in Paris? Answer in JSON.")
            good += isinstance(json.loads(out["raw"].content), dict)
        except Exception as e:  # noqa: BLE001
            print("# json_mode: %s" % e)
    check(good == 3, "langchain with_structured_output(method='json_mode'):"
          " 3 JSON objects")

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return json.dumps({"city": city, "temp": 18})

    question = HumanMessage("Weather in Paris?")
    ai = llm.bind_tools([get_weather], tool_choice="required").invoke(
        [question])
    check(len(ai.tool_calls) >= 1
          and all(tc["name"] == "get_weather" and "city" in tc["args"]
                  for tc in ai.tool_calls),
          "langchain bind_tools: the answer calls get_weather")

    history = [question, ai] + [
        ToolMessage(get_weather.invoke(tc["args"]), tool_call_id=tc["id"])
        for tc in ai.tool_calls]
    try:
        final = llm.bind_tools([get_weather]).invoke(history)
        check(final.response_metadata.get("finish_reason")
              in ("stop", "length", "tool_calls"),
              "langchain: the tool results sent back are answered")
    except Exception as e:  # noqa: BLE001
        check(False, "langchain: the tool results sent back are answered "
              "(%s)" % e)


def main():
    base = sys.argv[1]
    parts = sys.argv[2:] or ["openai", "langchain"]
    client = OpenAI(base_url=base, api_key="unused", max_retries=0,
                    timeout=120)

    if "openai" in parts:
        sdk_round(client)
    if "langchain" in parts:
        langchain(base)


if __name__ == "__main__":
    main()
