"""The schema corpus against a running ngx_http_vlm_module.

Run by t/085-schema-corpus.t: argv is the base URL, the corpus folder
(tests/fixtures/schemas) and the number of seeds.  The fixture model
has random weights, so only the grammar shapes its answers: every schema
of accepted/ is asked for an answer at temperature 1 with each seed, and
each answer must validate (jsonschema, its format checker included);
every schema of refused/ must be a 400 whose message names the path and
the keyword of the file.  Prints one TAP-style line per check.
"""

import glob
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
from openai import OpenAI

# JSON Schema 2020-12's formats ("time" with its offset, as RFC 3339's)
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def check(cond, name):
    print(("ok" if cond else "not ok") + " - " + name, flush=True)


MESSAGES = [{"role": "user", "content": "Answer in JSON."}]


def accepted(client, folder, seeds):
    files = sorted(glob.glob(os.path.join(folder, "accepted", "*.json")))
    jobs = [(f, s) for f in files for s in range(seeds)]

    def one(job):
        path, seed = job
        with open(path) as f:
            schema = json.load(f)
        try:
            r = client.chat.completions.create(
                model="serving", messages=MESSAGES, temperature=1,
                seed=seed, max_tokens=600,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "corpus", "schema": schema}})
        except openai.APIError as e:
            return path, "request: %s" % e
        text = r.choices[0].message.content
        try:
            jsonschema.validate(json.loads(text), schema,
                                format_checker=FORMATS)
            return path, None
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            return path, "seed %d: %r (finish_reason %s): %s" % (
                seed, text, r.choices[0].finish_reason,
                str(e).splitlines()[0])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, jobs))

    for path in files:
        bad = [e for p, e in results if p == path and e]
        for e in bad[:2]:
            print("# %s: %s" % (os.path.basename(path), e))
        check(not bad, "%d answers of %s validate"
              % (seeds, os.path.basename(path)))


def refused(client, folder):
    for path in sorted(glob.glob(os.path.join(folder, "refused", "*.json"))):
        with open(path) as f:
            case = json.load(f)
        name = os.path.basename(path)
        try:
            client.chat.completions.create(
                model="serving", messages=MESSAGES, max_tokens=8,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "corpus", "schema": case["schema"]}})
            check(False, "%s refused" % name)
        except openai.BadRequestError as e:
            msg = e.body.get("message", "") if isinstance(e.body, dict) \
                else str(e)
            check(e.status_code == 400 and (case["path"] + ":") in msg
                  and case["keyword"] in msg,
                  "%s refused with %s and '%s' (%s)"
                  % (name, case["path"], case["keyword"], msg))


def main():
    base, folder, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = OpenAI(base_url=base, api_key="none", max_retries=0,
                    timeout=120)
    accepted(client, folder, seeds)
    refused(client, folder)


if __name__ == "__main__":
    main()
