"""The rest of the API surface through the OpenAI Python SDK.

Run by t/069-openai-sdk-api.t: argv is the base URL and two token ids of
the model (a, b) with their texts.  Prints one TAP-style line per check.
"""

import sys

import openai
from openai import OpenAI


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


def main():
    base, a, a_text, b, b_text = sys.argv[1:6]

    client = OpenAI(base_url=base, api_key="unused", max_retries=0,
                    timeout=60)
    messages = [{"role": "user", "content": "Describe the picture."}]

    # logit_bias
    r = client.chat.completions.create(
        model="serving", messages=messages, max_tokens=4, temperature=0,
        logit_bias={a: 100, b: 99.5}, logprobs=True, top_logprobs=2)
    check(r.choices[0].message.content == a_text * 4,
          "logit_bias: +100 on token %s every step" % a)
    lp = r.choices[0].logprobs.content[0]
    check(lp.top_logprobs[1].token == b_text,
          "logit_bias: the other biased token is the runner-up")

    try:
        client.chat.completions.create(model="serving", messages=messages,
                                       logit_bias={"x": 1})
        check(False, "a bad logit_bias key raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "logit_bias",
              "a bad logit_bias key raises BadRequestError")

    # completions
    c = client.completions.create(model="serving", prompt="The answer is",
                                  max_tokens=4, temperature=0, logprobs=1)
    check(c.object == "text_completion" and c.id.startswith("cmpl-"),
          "completions: a text_completion")
    check(c.usage.completion_tokens == 4 and c.choices[0].finish_reason
          == "length", "completions: usage and finish_reason")
    check("".join(c.choices[0].logprobs.tokens) == c.choices[0].text
          and c.choices[0].logprobs.text_offset[0] == 0,
          "completions: logprobs tokens and text_offset")
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="serving", prompt="The answer is", max_tokens=4,
        temperature=0, stream=True) if ch.choices)
    check(streamed == c.choices[0].text, "completions: streamed the same")
    c2 = client.completions.create(model="serving", prompt=[[1, 2, 3]],
                                   max_tokens=2, temperature=0)
    check(c2.usage.prompt_tokens == 3, "completions: a prompt of token ids")

    try:
        client.completions.create(model="serving", prompt="x", echo=True)
        check(False, "completions: echo raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "echo",
              "completions: echo raises BadRequestError")

    # n: two choices, streamed interleaved by index, usage once
    r = client.chat.completions.create(model="serving", messages=messages,
                                       n=2, max_tokens=6, temperature=1,
                                       seed=5)
    check([ch.index for ch in r.choices] == [0, 1]
          and all(ch.finish_reason in ("stop", "length")
                  for ch in r.choices), "n=2: choices 0 and 1")
    r1 = client.chat.completions.create(model="serving", messages=messages,
                                        max_tokens=6, temperature=1, seed=5)
    check(r.usage.prompt_tokens == r1.usage.prompt_tokens
          and r.choices[0].message.content == r1.choices[0].message.content,
          "n=2: the prompt counted once; choice 0 is the seed's draw")
    texts = {0: "", 1: ""}
    finishes = {}
    usage = []
    for ch in client.chat.completions.create(
            model="serving", messages=messages, n=2, max_tokens=6,
            temperature=1, seed=5, stream=True,
            stream_options={"include_usage": True}):
        if ch.usage is not None:
            usage.append(ch.usage)
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    check([texts[0], texts[1]] == [c.message.content for c in r.choices]
          and sorted(finishes) == [0, 1],
          "n=2 streamed: the same choices, a finish each")
    check(len(usage) == 1
          and usage[0].completion_tokens == r.usage.completion_tokens,
          "n=2 streamed: usage once, the same")
    c = client.completions.create(model="serving", prompt="The answer is",
                                  n=2, max_tokens=3, temperature=0)
    check([ch.index for ch in c.choices] == [0, 1]
          and c.choices[0].text == c.choices[1].text,
          "completions n=2: two greedy choices")

    try:
        client.chat.completions.create(model="serving", messages=messages,
                                       n=9)
        check(False, "n above vlm_max_n raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "n",
              "n above vlm_max_n raises BadRequestError")

    # models
    models = client.models.list()
    check([m.id for m in models.data] == ["serving"], "models.list")
    m = client.models.retrieve("serving")
    check(m.id == "serving" and m.object == "model"
          and m.owned_by == "ngx_http_vlm_module"
          and m.created == models.data[0].created, "models.retrieve")
    check(getattr(m, "max_model_len", None) == 4096
          and getattr(m, "root", None) == "serving",
          "models.retrieve: max_model_len and root")

    try:
        client.models.retrieve("gpt-4")
        check(False, "models.retrieve of another model raises NotFoundError")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.code == "model_not_found",
              "models.retrieve of another model raises NotFoundError")


if __name__ == "__main__":
    main()
