"""Structured output against a running ngx_http_vlm_module.

Run by t/060-structured.t: argv is the base URL and the number of
constrained requests.  The model of the fixture has random weights, so
only the grammar makes its answers JSON: every answer at temperature 1
must parse and validate against its schema (the jsonschema package, not
the server, decides).  Then json_object mode, schemas the server must
refuse with the JSON path, the OpenAI SDK's beta parse() with a Pydantic
model, and tools with tool_choice "required" and a named function,
streamed and not.  Prints one TAP-style line per check.
"""

import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal, Union

import jsonschema
import openai
import pydantic
from openai import OpenAI

# JSON Schema 2020-12's formats ("time" with its offset, as RFC 3339's)
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


MESSAGES = [{"role": "user", "content": "Answer in JSON."}]

SCHEMAS = {
    "flat object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0},
            "ok": {"type": "boolean"},
            "score": {"type": "number"},
        },
        "required": ["name", "age", "ok"],
        "additionalProperties": False,
    },
    "array of enums": {
        "type": "array",
        "items": {"enum": ["red", "green", "blue", 7, None]},
        "minItems": 1,
        "maxItems": 4,
    },
    "refs and anyOf": {
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"},
                               "y": {"type": "number"}},
                "required": ["x", "y"],
            },
        },
        "type": "object",
        "properties": {
            "from": {"$ref": "#/$defs/point"},
            "to": {"anyOf": [{"$ref": "#/$defs/point"}, {"type": "null"}]},
            "label": {"type": ["string", "null"], "maxLength": 8},
        },
        "required": ["from", "to", "label"],
    },
    "recursive tree": {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                             "maxItems": 2},
                },
                "required": ["v", "kids"],
            },
        },
    },
    "const and formats": {
        "type": "object",
        "properties": {
            "kind": {"const": "event"},
            "id": {"type": "string", "format": "uuid"},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["kind", "id", "when", "day"],
    },
    "any object values": {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    },
    "top-level string": {"type": "string", "minLength": 3, "maxLength": 5},
    "nested arrays": {
        "type": "array",
        "items": {"type": "array", "items": {"type": "number"},
                  "minItems": 2, "maxItems": 2},
        "minItems": 2,
    },
    # Pydantic's ge, le, gt, lt and multiple_of
    "bounds": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "p": {"type": "number", "exclusiveMinimum": 0,
                  "exclusiveMaximum": 1},
            "t": {"type": "number", "minimum": -273.15, "maximum": 100},
            "even": {"type": "integer", "multipleOf": 2,
                     "exclusiveMinimum": -9, "exclusiveMaximum": 21},
            "n": {"type": ["integer", "null"], "maximum": -1000},
        },
        "required": ["age", "p", "t", "even", "n"],
        "additionalProperties": False,
    },
    # patterns (ECMAScript regexes) and the formats made of them
    "patterns and formats": {
        "type": "object",
        "properties": {
            "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
            "code": {"type": "string", "pattern": "[A-Z]{2}\\d"},
            "mail": {"type": "string", "format": "email"},
            "ip": {"type": "string", "format": "ipv4"},
            "v6": {"type": "string", "format": "ipv6"},
            "host": {"type": "string", "format": "hostname"},
            "when": {"type": "string", "format": "duration"},
        },
        "required": ["zip", "code", "mail", "ip", "v6", "host", "when"],
        "additionalProperties": False,
    },
    # alternatives that start alike, told apart further on
    "tagged union": {
        "type": "array",
        "items": {"anyOf": [
            {"type": "object",
             "properties": {"kind": {"const": "circle"},
                            "r": {"type": "number"}},
             "required": ["kind", "r"], "additionalProperties": False},
            {"type": "object",
             "properties": {"kind": {"const": "rect"},
                            "w": {"type": "integer"},
                            "h": {"type": "integer"}},
             "required": ["kind", "w", "h"], "additionalProperties": False},
        ]},
        "minItems": 1,
        "maxItems": 3,
    },
    "discriminated oneOf": {
        "$defs": {
            "Cat": {"type": "object",
                    "properties": {"pet_type": {"const": "cat"},
                                   "lives": {"type": "integer"}},
                    "required": ["pet_type", "lives"],
                    "additionalProperties": False},
            "Dog": {"type": "object",
                    "properties": {"pet_type": {"enum": ["dog", "puppy"]},
                                   "name": {"type": "string",
                                            "maxLength": 6}},
                    "required": ["pet_type", "name"],
                    "additionalProperties": False},
        },
        "type": "object",
        "properties": {"pet": {
            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
            "discriminator": {"propertyName": "pet_type"}}},
        "required": ["pet"],
        "additionalProperties": False,
    },
    "int or number and nested unions": {
        "type": "array",
        "items": {"anyOf": [
            {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            {"type": "number"},
            {"anyOf": [{"type": "string", "maxLength": 2},
                       {"type": "string", "minLength": 4, "maxLength": 6},
                       {"enum": ["abc", 12]}]},
        ]},
        "minItems": 2,
        "maxItems": 4,
    },
}


def constrained(client, n):
    names = list(SCHEMAS)

    def one(i):
        name = names[i % len(names)]
        schema = SCHEMAS[name]
        r = client.chat.completions.create(
            model="serving", messages=MESSAGES, temperature=1,
            max_tokens=192,
            response_format={"type": "json_schema", "json_schema": {
                "name": name.replace(" ", "_"), "schema": schema,
                "strict": True}})
        text = r.choices[0].message.content
        try:
            doc = json.loads(text)
            jsonschema.validate(doc, schema,
                                format_checker=FORMATS)
            if name == "const and formats":
                uuid.UUID(doc["id"])
            return name, None
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            return name, "%r (finish_reason %s, %s completion tokens): %s" % (
                text, r.choices[0].finish_reason,
                r.usage.completion_tokens if r.usage else "?",
                str(e).splitlines()[0])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(n)))

    for name in names:
        bad = [e for k, e in results if k == name and e]
        count = sum(1 for k, _ in results if k == name)
        for e in bad[:3]:
            print("# " + name + ": " + e)
        check(count > 0 and not bad,
              "%d answers of schema '%s' validate" % (count, name))


# six items of one long const: 300-odd bytes that the fixture's vocabulary
# spells in about 20 tokens, so the bound in bytes never holds at
# max_tokens 30 and only the plan in tokens finishes the document in time
TIGHT = {
    "type": "array",
    "items": {"const": "\u89c6\u89c9\u8bed\u8a00\u6a21\u578b\u53ef"
                       "\u4ee5\u540c\u65f6\u7406\u89e3\u56fe\u50cf"
                       "\u548c\u6587\u5b57"},
    "minItems": 6,
    "maxItems": 6,
}


def tight(client):
    bad = []
    for _ in range(20):
        r = client.chat.completions.create(
            model="serving", messages=MESSAGES, temperature=1,
            max_tokens=30, response_format={"type": "json_schema",
                                            "json_schema": {
                                                "name": "tight",
                                                "schema": TIGHT}})
        text = r.choices[0].message.content
        try:
            jsonschema.validate(json.loads(text), TIGHT)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            bad.append("%r (finish_reason %s, %s completion tokens): %s" % (
                text, r.choices[0].finish_reason, r.usage.completion_tokens,
                str(e).splitlines()[0]))
    for e in bad[:3]:
        print("# tight: " + e)
    check(not bad, "20 answers of 300-odd bytes in max_tokens 30 validate")


def json_object(client):
    ok = 0
    for _ in range(10):
        r = client.chat.completions.create(
            model="serving", messages=MESSAGES, temperature=1,
            max_tokens=64, response_format={"type": "json_object"})
        try:
            ok += isinstance(json.loads(r.choices[0].message.content), dict)
        except ValueError:
            print("# not JSON: %r" % r.choices[0].message.content)
    check(ok == 10, "json_object: 10 answers are JSON objects")


def refused(client):
    cases = [
        ({"type": "object", "properties": {
            "a": {"type": "string", "pattern": "^(x+)\\1$"}}},
         "$.properties.a.pattern", "backreference"),
        ({"type": "number", "multipleOf": 0.01}, "$.multipleOf",
         "multipleOf"),
        ({"type": "array", "items": {"type": "string",
                                      "format": "idn-email"}},
         "$.items.format", "idn-email"),
    ]
    for schema, path, word in cases:
        try:
            client.chat.completions.create(
                model="serving", messages=MESSAGES, max_tokens=8,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "x", "schema": schema}})
            check(False, "refused: %s" % path)
        except openai.BadRequestError as e:
            msg = e.body.get("message", "") if isinstance(e.body, dict) \
                else str(e)
            check(e.status_code == 400
                  and e.param == "response_format.json_schema.schema"
                  and (path + ":") in msg and word in msg,
                  "refused with its path: %s (%s)" % (path, msg))


class Step(pydantic.BaseModel):
    explanation: str
    output: int


class Answer(pydantic.BaseModel):
    steps: list[Step]
    final: str
    confidence: float | None = None


class Circle(pydantic.BaseModel):
    kind: Literal["circle"]
    r: float


class Rect(pydantic.BaseModel):
    kind: Literal["rect"]
    w: int
    h: Union[int, float]


class Drawing(pydantic.BaseModel):
    shapes: list[Annotated[Union[Circle, Rect],
                           pydantic.Field(discriminator="kind")]]
    scale: Union[int, float]
    opacity: float = pydantic.Field(gt=0, le=1)
    layer: int = pydantic.Field(ge=-3, lt=40)


def sdk_parse(client):
    for model, tokens in ((Answer, 160), (Drawing, 120)):
        good = 0
        for _ in range(5):
            r = client.beta.chat.completions.parse(
                model="serving", messages=MESSAGES, temperature=1,
                max_tokens=tokens, response_format=model)
            parsed = r.choices[0].message.parsed
            good += isinstance(parsed, model)
        check(good == 5, "beta.chat.completions.parse: 5 %s objects"
              % model.__name__)


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
    {"type": "function", "function": {
        "name": "add",
        "description": "Adds two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"},
                           "b": {"type": "integer"}},
            "required": ["a", "b"],
        }}},
]


def tool_args_ok(name, args):
    for t in TOOLS:
        if t["function"]["name"] == name:
            jsonschema.validate(json.loads(args), t["function"]["parameters"])
            return True
    return False


def tools(client):
    for choice in ["required",
                   {"type": "function", "function": {"name": "add"}}]:
        label = choice if isinstance(choice, str) else "named"
        good = 0
        for _ in range(5):
            r = client.chat.completions.create(
                model="serving", messages=MESSAGES, temperature=1,
                max_tokens=120, tools=TOOLS, tool_choice=choice)
            c = r.choices[0]
            calls = c.message.tool_calls or []
            try:
                good += (c.finish_reason == "tool_calls" and len(calls) >= 1
                         and all(tc.id and tc.type == "function"
                                 and tool_args_ok(tc.function.name,
                                                  tc.function.arguments)
                                 for tc in calls)
                         and (label == "required"
                              or all(tc.function.name == "add"
                                     for tc in calls)))
            except Exception as e:  # noqa: BLE001
                print("# %s: %s" % (label, e))
        check(good == 5, "tools, tool_choice %s: 5 answers call a tool "
              "with valid arguments" % label)

        # streamed: the name first, then argument deltas
        good = 0
        for _ in range(3):
            calls = {}
            finish = None
            for chunk in client.chat.completions.create(
                    model="serving", messages=MESSAGES, temperature=1,
                    max_tokens=120, tools=TOOLS, tool_choice=choice,
                    stream=True):
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                for tc in d.tool_calls or []:
                    e = calls.setdefault(tc.index, {"id": None, "name": None,
                                                    "args": ""})
                    if tc.id:
                        e["id"] = tc.id
                    if tc.function and tc.function.name:
                        e["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        e["args"] += tc.function.arguments
                finish = chunk.choices[0].finish_reason or finish
            try:
                good += (finish == "tool_calls" and len(calls) >= 1
                         and all(e["id"] and tool_args_ok(e["name"],
                                                          e["args"])
                                 for e in calls.values()))
            except Exception as e:  # noqa: BLE001
                print("# stream %s: %s" % (label, e))
        check(good == 3, "tools streamed, tool_choice %s: 3 answers"
              % label)


def main():
    base, n = sys.argv[1], int(sys.argv[2])
    client = OpenAI(base_url=base, api_key="unused", max_retries=0,
                    timeout=120)
    parts = sys.argv[3:] or ["constrained", "tight", "json_object",
                             "refused", "parse", "tools"]

    if "constrained" in parts:
        constrained(client, n)
    if "tight" in parts:
        tight(client)
    if "json_object" in parts:
        json_object(client)
    if "refused" in parts:
        refused(client)
    if "parse" in parts:
        sdk_parse(client)
    if "tools" in parts:
        tools(client)


if __name__ == "__main__":
    main()
