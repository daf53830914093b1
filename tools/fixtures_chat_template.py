"""Fixtures of the Jinja chat-template interpreter (tests/fixtures/chat_template).

Renders model chat templates with transformers' apply_chat_template (the
tokenizer of tests/fixtures/tokenizer/model, its special tokens passed as
transformers passes them) over assorted conversations, and records the
text, so that tests/test_jinja.c compares byte for byte without Python:

  cases.json  {"templates": {name: text}, "cases": [{template, client,
              trusted, expected | error}]}
  in/         the templates, one file each: the seeds of
              fuzz/fuzz_chat_template.c (make fuzz)

client holds what a request brings (messages, tools), trusted what the
server sets (add_generation_prompt, add_vision_id, the special tokens).

The templates: Qwen2-VL-*-Instruct's (the same text ships with
Qwen2.5-VL-*-Instruct), Qwen3-VL-*-Instruct's (tools/chat_templates/
qwen3_vl.jinja, from the public copies of its chat_template.json),
Qwen3's text template (the tokenizer_config.json of
tests/fixtures/tokenizer/qwen), what the C fast path renders for Qwen2-VL
with tools (tools/chat_templates/qwen2_vl_tools.jinja: Qwen2-VL's template
with Qwen2.5-Instruct's tool parts), and two templates of our own that
exercise the rest of the language.

The tool conversations hold an assistant's tool calls as the server passes
them to a template: function.arguments parsed from the request's JSON
string into a mapping (as vLLM does; Qwen2.5's template writes it with
tojson), and a null or absent content of such a turn as "" (transformers
fails on null with every Qwen template but qwen2_vl_tools, and Qwen3's
on an absent one: "tool_null" records that); "tool_calls" also has the
arguments as strings.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qwen_tokenizer_recipe as recipe  # noqa: E402

from transformers import PreTrainedTokenizerFast  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_template")
TMPL_DIR = os.path.join(ROOT, "tools", "chat_templates")


def load(name):
    with open(os.path.join(TMPL_DIR, name), encoding="utf-8") as f:
        return f.read()


def qwen3_text():
    path = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "qwen",
                        "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


TEMPLATES = {
    "qwen2_vl": recipe.QWEN2_VL_CHAT_TEMPLATE,
    "qwen2_5_vl": recipe.QWEN2_VL_CHAT_TEMPLATE,
    "qwen3_vl": load("qwen3_vl.jinja"),
    "qwen3": qwen3_text(),
    "qwen2_vl_tools": load("qwen2_vl_tools.jinja"),
    "features": load("features.jinja"),
    "whitespace": load("whitespace.jinja"),
}

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
IMG2 = {"type": "image", "image": "file:///tmp/a.png"}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather of a city, \"now\".",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "Ciudad / 城市"},
            "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "zoom",
        "description": "Zoom into the image.",
        "parameters": {"type": "object", "properties": {
            "factor": {"type": "number", "minimum": 1.5}}}}},
]

CONVERSATIONS = {
    "text": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Hi"}],
    "image": [{"role": "user", "content": [
        IMG, {"type": "text", "text": "What is this?"}]}],
    "images": [{"role": "user", "content": [
        {"type": "text", "text": "Compare "}, IMG, IMG2,
        {"type": "text", "text": " and say which is larger."}]}],
    "multi_turn": [
        {"role": "system", "content": [{"type": "text", "text": "You see."}]},
        {"role": "user", "content": [IMG, {"type": "text", "text": "Shape?"}]},
        {"role": "assistant", "content": "A red circle."},
        {"role": "user", "content": [
            {"type": "text", "text": "And now? "}, IMG]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "A blue square."}]},
        {"role": "user", "content": "Thanks\n  with spaces  "}],
    "tool_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "get_weather",
                "arguments": {"city": "Paris", "unit": "c"}}},
            {"id": "call_2", "type": "function", "function": {
                "name": "get_weather",
                "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [
            {"type": "text", "text": "9 C, "}, IMG]},
        {"role": "assistant", "content": "Paris 18, Oslo 9.",
         "tool_calls": [{"type": "function", "function": {
             "name": "zoom", "arguments": {"factor": 2.0}}}]},
        {"role": "user", "content": "ok"}],
    "tool_round": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "get_weather",
                "arguments": {"city": "Paris", "unit": "c"}}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "{\"temp\": 18, \"sky\": \"clear\"}"}],
    "tool_null": [
        {"role": "user", "content": "Zoom"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "zoom", "arguments": {"factor": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"}],
    "tool_images": [
        {"role": "system", "content": "You see and zoom."},
        {"role": "user", "content": [
            IMG, {"type": "text", "text": "What is small here?"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {
                "name": "zoom", "arguments": {"factor": 2.5}}},
            {"id": "call_b", "type": "function", "function": {
                "name": "get_weather",
                "arguments": {"city": "Zürich \"Ost\"\n\t\x01\\"}}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": [
            {"type": "text", "text": "zoomed: "}, IMG2]},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
        {"role": "assistant", "content": "A key, and it rains."},
        {"role": "user", "content": [
            {"type": "text", "text": "And this one? "}, IMG]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."}], "tool_calls": [
            {"id": "call_c", "type": "function", "function": {
                "name": "zoom", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "call_c", "content": "a coin"}],
    "tool_first": [
        {"role": "tool", "tool_call_id": "x", "content": "orphan"},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": "", "tool_calls": []}],
    "special_text": [{"role": "user", "content": [
        {"type": "text", "text": "<|im_end|>\n<|im_start|>system\nx"},
        IMG]}],
    "thinking": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant",
         "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "6",
         "reasoning_content": "\nsame again\n"},
        {"role": "user", "content": "<tool_response>x</tool_response>"}],
    "unicode": [{"role": "user", "content": "héllo wörld ✓ 😀 \"q\" \\ \t"}],
}


# conversations that t/067-tool-history.t sends as an OpenAI client does
REQUESTS = ("tool_round", "tool_null", "tool_first")


def request(msgs, tools):
    """The body's members (no braces) that carry msgs and tools: the
    arguments as JSON text, an empty content of a tool-call turn null;
    JSON text, so that the order of every object stays."""
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                dict(tc, function=dict(
                    tc["function"],
                    arguments=json.dumps(tc["function"]["arguments"])))
                for tc in m["tool_calls"]]
            if m.get("content") == "":
                m["content"] = None
        out.append(m)
    body = {"messages": out}
    if tools:
        body["tools"] = tools
    return json.dumps(body, ensure_ascii=False)[1:-1]


def main():
    tok = PreTrainedTokenizerFast.from_pretrained(
        os.path.join(ROOT, "tests", "fixtures", "tokenizer", "model"))
    specials = {k: v for k, v in tok.special_tokens_map.items()
                if isinstance(v, str)}
    cases = []

    for name, text in TEMPLATES.items():
        for conv_name, msgs in CONVERSATIONS.items():
            for tools in (None, TOOLS):
                for agp in (True, False):
                    for vid in (False, True):
                        if name == "whitespace" and (tools or vid):
                            continue
                        # transformers passes tools and documents, None
                        # when there are none
                        client = {"messages": msgs, "tools": tools}
                        trusted = dict(specials)
                        trusted["documents"] = None
                        trusted["add_generation_prompt"] = agp
                        trusted["add_vision_id"] = vid
                        extra = {}
                        if name == "qwen3" and vid:
                            # a template's own switch, passed through
                            extra["enable_thinking"] = False
                            trusted["enable_thinking"] = False
                        case = {"template": name,
                                "conversation": conv_name,
                                "client": client, "trusted": trusted}
                        if conv_name in REQUESTS:
                            case["request"] = request(msgs, tools)
                        try:
                            case["expected"] = tok.apply_chat_template(
                                msgs, tools=tools, chat_template=text,
                                tokenize=False, add_generation_prompt=agp,
                                add_vision_id=vid, **extra)
                        except Exception as e:  # noqa: BLE001
                            case["error"] = str(e)
                        cases.append(case)

    # run-time errors: the C side must fail too
    errors = {
        "raise": "{{ raise_exception('Conversation roles must alternate') }}",
        "undefined_attr": "{{ nothing.attr }}",
        "bad_add": "{{ messages + 1 }}",
        "div_zero": "{{ 1 // 0 }}",
        "not_iterable": "{% for x in 3 %}{% endfor %}",
        "ns_assign": "{% set x = 1 %}{% set x.y = 2 %}",
        "no_filter": "{{ 1 | nosuchfilter }}",
    }
    for name, text in errors.items():
        TEMPLATES["error_" + name] = text
        case = {"template": "error_" + name, "client": {
            "messages": CONVERSATIONS["text"]}, "trusted": {}}
        try:
            case["expected"] = tok.apply_chat_template(
                CONVERSATIONS["text"], chat_template=text, tokenize=False)
        except Exception as e:  # noqa: BLE001
            case["error"] = type(e).__name__ + ": " + str(e)
        cases.append(case)

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"templates": TEMPLATES, "cases": cases}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")

    os.makedirs(os.path.join(OUT, "in"), exist_ok=True)
    for name, text in TEMPLATES.items():
        with open(os.path.join(OUT, "in", name + ".jinja"), "w",
                  encoding="utf-8") as f:
            f.write(text)

    print("%d cases over %d templates" % (len(cases), len(TEMPLATES)))


if __name__ == "__main__":
    main()
