"""A thinking model's reasoning through the OpenAI Python SDK.

Run by t/083-reasoning.t: argv is the base URL, the model name, the
logit_bias (a JSON object) that closes the reasoning midway, the
reasoning and the answer the test expects.  Prints one TAP-style line
per check: the SDK's own types parse the Responses API's reasoning item
and its stream events, and the chat's reasoning_content.
"""

import json
import sys

from openai import OpenAI


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


def main():
    url, model, bias, want_r, want_c = sys.argv[1:6]
    bias = json.loads(bias)
    client = OpenAI(base_url=url, api_key="unused", max_retries=0,
                    timeout=60)

    r = client.responses.create(model=model, input="Why is the sky blue?",
                                temperature=0, max_output_tokens=16,
                                extra_body={"logit_bias": bias})
    item = r.output[0]
    check(type(item).__name__ == "ResponseReasoningItem",
          "responses.create: a ResponseReasoningItem")
    check(item.content[0].type == "reasoning_text"
          and item.content[0].text == want_r,
          "responses.create: its reasoning_text")
    check(r.output_text == want_c, "responses.create: output_text")
    check(r.usage.output_tokens_details.reasoning_tokens > 0,
          "responses.create: reasoning_tokens")

    # cut at max_output_tokens: the last event is response.incomplete
    # (the helper's get_final_response() wants response.completed)
    text, deltas, final = "", [], None
    with client.responses.stream(model=model, input="Why is the sky blue?",
                                 temperature=0, max_output_tokens=16,
                                 extra_body={"logit_bias": bias}) as s:
        for ev in s:
            if ev.type == "response.reasoning_text.delta":
                deltas.append(ev.delta)
            elif ev.type == "response.output_text.delta":
                text += ev.delta
            elif ev.type == "response.incomplete":
                final = ev.response
    check("".join(deltas) == want_r, "responses.stream: reasoning deltas")
    check(text == want_c, "responses.stream: text deltas")
    check(final is not None and final.output[0].type == "reasoning",
          "responses.stream: the final response's reasoning item")

    c = client.chat.completions.create(
        model=model, temperature=0, max_tokens=16, logit_bias=bias,
        messages=[{"role": "user", "content": "Why is the sky blue?"}])
    m = c.choices[0].message
    check(getattr(m, "reasoning_content", None) == want_r,
          "chat: message.reasoning_content")
    check(m.content == want_c, "chat: content")
    check(c.usage.completion_tokens_details.reasoning_tokens > 0,
          "chat: completion_tokens_details.reasoning_tokens")


if __name__ == "__main__":
    main()
