"""POST /v1/responses through the OpenAI Python SDK.

Run by t/081-responses.t: argv is the base URL.  Prints one TAP-style
line per check: responses.create (a string, items with an image, a
function tool round trip), responses.parse with a Pydantic model,
responses.create(stream=True) and the responses.stream helper, and the
refusals as the SDK's exceptions.
"""

import base64
import struct
import sys
import zlib

import openai
from openai import OpenAI
from pydantic import BaseModel


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


def png(w, h):
    rows = []
    for y in range(h):
        row = b"\0"
        for x in range(w):
            row += bytes((x * 7 & 255, y * 5 & 255, (x + y) & 255))
        rows.append(row)
    raw = b"".join(rows)

    def chunk(t, d):
        return (struct.pack(">I", len(d)) + t + d
                + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class Doc(BaseModel):
    n: int
    ok: bool


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0,
                    timeout=60)

    r = client.responses.create(model="serving", input="Hello",
                                instructions="Be brief.",
                                max_output_tokens=8, temperature=0)
    check(r.id.startswith("resp_") and r.object == "response",
          "create: a response")
    check(isinstance(r.output_text, str) and len(r.output_text) > 0,
          "create: output_text")
    check(r.status == "incomplete"
          and r.incomplete_details.reason == "max_output_tokens",
          "create: incomplete at max_output_tokens")
    check(r.usage.output_tokens == 8
          and r.usage.total_tokens
          == r.usage.input_tokens + r.usage.output_tokens,
          "create: usage")
    text = r.output_text

    url = "data:image/png;base64," + base64.b64encode(png(32, 24)).decode()
    r = client.responses.create(model="serving", max_output_tokens=4,
                                temperature=0, input=[{
                                    "role": "user", "content": [
                                        {"type": "input_image",
                                         "image_url": url, "detail": "high"},
                                        {"type": "input_text",
                                         "text": "What is it?"}]}])
    check(r.output[0].type == "message" and r.usage.input_tokens > 20,
          "create: an image")

    # the raw stream: typed events, the deltas make the same text
    events = list(client.responses.create(model="serving", input="Hello",
                                          instructions="Be brief.",
                                          max_output_tokens=8,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    check(types[0] == "response.created"
          and types[1] == "response.in_progress"
          and types[-1] == "response.incomplete",
          "create(stream=True): created, in_progress ... incomplete")
    deltas = "".join(e.delta for e in events
                     if e.type == "response.output_text.delta")
    check(deltas == text, "create(stream=True): the deltas make the text")

    # the stream helper (cut by max_output_tokens: response.incomplete,
    # which get_final_response() does not take, as with OpenAI)
    with client.responses.stream(model="serving", input="Hello",
                                 instructions="Be brief.",
                                 max_output_tokens=8,
                                 temperature=0) as stream:
        seen = list(stream)
    done = [e for e in seen if e.type == "response.output_text.done"]
    check(len(done) == 1 and done[0].text == text, "stream: the text done")
    check(seen[-1].type == "response.incomplete"
          and seen[-1].response.output_text == text,
          "stream: response.incomplete with the output")

    # structured output
    r = client.responses.parse(model="serving", input="A document.",
                               max_output_tokens=40, text_format=Doc)
    check(isinstance(r.output_parsed, Doc), "parse: a Pydantic Doc")

    # a function tool round trip
    tools = [{"type": "function", "name": "area", "strict": True,
              "parameters": {"type": "object",
                             "properties": {"side": {"type": "integer"}},
                             "required": ["side"],
                             "additionalProperties": False}}]
    r = client.responses.create(model="serving", input="Area?",
                                tools=tools, tool_choice="required",
                                max_output_tokens=200,
                                parallel_tool_calls=False)
    calls = [o for o in r.output if o.type == "function_call"]
    check(len(calls) >= 1 and calls[0].name == "area",
          "tools: a function_call")
    history = [{"role": "user", "content": "Area?"}] + [
        {"type": "function_call", "call_id": c.call_id, "name": c.name,
         "arguments": c.arguments} for c in calls] + [
        {"type": "function_call_output", "call_id": calls[0].call_id,
         "output": "4"}]
    r = client.responses.create(model="serving", input=history, tools=tools,
                                max_output_tokens=4)
    check(r.status in ("completed", "incomplete"),
          "tools: the result sent back")

    with client.responses.stream(model="serving", input="Area?", tools=tools,
                                 tool_choice="required",
                                 max_output_tokens=200,
                                 parallel_tool_calls=False) as stream:
        seen = [e.type for e in stream]
        final = stream.get_final_response()
    check("response.function_call_arguments.delta" in seen
          and final.output[0].type == "function_call"
          and final.output[0].name == "area",
          "tools: streamed, get_final_response")

    # refusals
    for kw, param in (({"previous_response_id": "resp_x"},
                       "previous_response_id"),
                      ({"store": True}, "store"),
                      ({"max_output_tokens": 0}, "max_output_tokens")):
        try:
            client.responses.create(model="serving", input="x", **kw)
            check(False, "%s: BadRequestError" % param)
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.param == param,
                  "%s: BadRequestError" % param)


main()
