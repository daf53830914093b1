"""The OpenAI Python SDK against a running ngx_http_vlm_module.

Run by t/009-openai-sdk.t: argv is the base URL, a PNG file, and what the
same request made without the SDK answered (prompt tokens and text at
temperature 0).  Prints one TAP-style line per check.
"""

import base64
import sys

import openai
from openai import OpenAI


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


def main():
    base, png, prompt_tokens, text = sys.argv[1:5]
    prompt_tokens = int(prompt_tokens)

    client = OpenAI(base_url=base, api_key="unused", max_retries=0,
                    timeout=60)

    with open(png, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()

    messages = [{
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "What is in this image?"},
        ],
    }]

    # stream=False
    r = client.chat.completions.create(model="serving", messages=messages,
                                       max_tokens=6, temperature=0)
    check(r.object == "chat.completion", "object chat.completion")
    check(r.id.startswith("chatcmpl-"), "id")
    check(r.model == "serving", "model")
    check(len(r.choices) == 1, "one choice")
    check(r.choices[0].message.role == "assistant", "role assistant")
    check(r.choices[0].message.content == text, "the text")
    check(r.choices[0].finish_reason == "length", "finish_reason length")
    check(r.usage.prompt_tokens == prompt_tokens, "usage.prompt_tokens %d"
          % r.usage.prompt_tokens)
    check(r.usage.completion_tokens == 6, "usage.completion_tokens")
    check(r.usage.total_tokens == prompt_tokens + 6, "usage.total_tokens")

    # stream=True, with usage
    chunks = list(client.chat.completions.create(
        model="serving", messages=messages, max_tokens=6, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks
              if c.choices and c.choices[0].finish_reason]
    check(all(c.object == "chat.completion.chunk" for c in chunks),
          "stream: chunk objects")
    check(len({c.id for c in chunks}) == 1, "stream: one id")
    check(streamed == text, "stream: the same text")
    check(finish == ["length"], "stream: one finish_reason length")
    check(chunks[-1].usage is not None
          and chunks[-1].usage.prompt_tokens == prompt_tokens
          and chunks[-1].usage.completion_tokens == 6,
          "stream: usage in the last chunk")

    # stream=True, the SDK's context manager closing early
    with client.chat.completions.create(
            model="serving", messages=messages, max_tokens=50,
            temperature=0, stream=True) as s:
        first = next(iter(s))
    check(first.choices[0].delta.role == "assistant",
          "stream closed early: the first chunk")

    # logprobs
    r = client.chat.completions.create(model="serving", messages=messages,
                                       max_tokens=3, temperature=0,
                                       logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    check(len(lp) == 3 and all(len(t.top_logprobs) == 2 for t in lp),
          "logprobs: three tokens, two alternatives each")

    # models
    models = client.models.list()
    check([m.id for m in models.data] == ["serving"], "models.list")

    # errors become the SDK's exceptions
    try:
        client.chat.completions.create(model="nope", messages=messages)
        check(False, "unknown model raises NotFoundError")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.code == "model_not_found"
              and e.param == "model",
              "unknown model raises NotFoundError")

    try:
        client.chat.completions.create(model="serving", messages=messages,
                                       n=100)
        check(False, "n above vlm_max_n raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "n",
              "n above vlm_max_n raises BadRequestError")


if __name__ == "__main__":
    main()
