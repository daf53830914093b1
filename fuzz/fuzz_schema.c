/*
 * libFuzzer harness of constrained decoding: the input is a JSON schema
 * (or, when it is an array, tools: [{"name", "parameters"}]; after a byte
 * 0x01 a GBNF grammar, after 0x02 a regular expression, as a request's
 * guided_grammar and guided_regex give them), a NUL byte, then a
 * document.  A schema either compiles to a program that vlm_grammar_open
 * accepts or fails with a message; the document's bytes are fed one at a
 * time, and before each the mask (over a vocabulary of every single byte
 * and a few words) must allow that byte's token exactly when the
 * automaton then accepts it, the mask leaving the state as it was.  A
 * complete document must be at distance 0 and, a schema's, parse as JSON
 * (jansson).
 *
 *   make fuzz                      (clang; every fuzz/fuzz_*.c)
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/vlm_gbnf.h"
#include "api/vlm_schema.h"
#include "grammar/vlm_grammar.h"


#define fuzz_check(cond)  do { if (!(cond)) abort(); } while (0)

#define N_WORDS  6
#define VOCAB    (256 + N_WORDS)


static vlm_trie_t     *trie;
static vlm_matcher_t  *matcher;
static const char     *tok_bytes[VOCAB];
static size_t          tok_lens[VOCAB];


static void
fuzz_init(void)
{
    int           i;
    vlm_error_t   err;

    static char         singles[256];
    static const char  *words[N_WORDS] = {
        "{\"", "\":", "\",\"", "true", "<tool_call>", "\", \"arguments\": "
    };

    for (i = 0; i < 256; i++) {
        singles[i] = (char) i;
        tok_bytes[i] = &singles[i];
        tok_lens[i] = 1;
    }

    for (i = 0; i < N_WORDS; i++) {
        tok_bytes[256 + i] = words[i];
        tok_lens[256 + i] = strlen(words[i]);
    }

    fuzz_check(vlm_trie_build(&trie, VOCAB, tok_bytes, tok_lens, &err) == VLM_OK);
    fuzz_check(vlm_matcher_create(&matcher, trie, &err) == VLM_OK);
}


/*
 * The plan: a bound in tokens no more than the one in bytes, its first
 * token leaving the rest of it, the state unchanged.
 */
static void
fuzz_plan(vlm_matcher_t *m)
{
    int32_t   first;
    uint32_t  plan, d;

    d = vlm_matcher_distance(m);
    plan = vlm_matcher_plan(m, &first);

    if (plan == VLM_GRAMMAR_NONE) {
        return;
    }

    fuzz_check(plan <= d);
    fuzz_check((plan == 0) == (first < 0));
    fuzz_check((plan == 0) == vlm_matcher_complete(m));

    if (first >= 0) {
        fuzz_check(vlm_matcher_plan_after(m, tok_bytes[first],
                                          tok_lens[first])
                   == plan - 1);
    }

    fuzz_check(vlm_matcher_distance(m) == d);
}


static vlm_status_t
fuzz_compile(json_t *s, vlm_schema_out_t *out, vlm_error_t *err)
{
    size_t           i, n;
    json_t          *t;
    vlm_schema_fn_t  fns[8];

    if (!json_is_array(s)) {
        return vlm_schema_compile(s, out, err);
    }

    n = json_array_size(s);
    n = n > 8 ? 8 : n;

    for (i = 0; i < n; i++) {
        t = json_array_get(s, i);
        fns[i].name = json_string_value(json_object_get(t, "name"));
        fns[i].name = fns[i].name ? fns[i].name : "f";
        fns[i].parameters = json_object_get(t, "parameters");
    }

    return vlm_schema_compile_tools(fns, (uint32_t) n, 2, out, err);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int               ok, allowed, text;
    size_t            i, slen, dlen;
    json_t           *s, *doc;
    int32_t           end;
    const uint8_t    *d, *nul;
    const uint32_t   *mask;
    vlm_error_t       err;
    vlm_status_t      rc;
    vlm_grammar_t     g;
    vlm_schema_out_t  out;

    if (trie == NULL) {
        fuzz_init();
    }

    nul = memchr(data, 0, size);
    slen = nul ? (size_t) (nul - data) : size;
    d = nul ? nul + 1 : data + size;
    dlen = (size_t) (data + size - d);
    dlen = dlen > 256 ? 256 : dlen;

    text = (slen > 0 && (data[0] == 0x01 || data[0] == 0x02)) ? data[0] : 0;
    s = NULL;

    if (text == 0x01) {
        rc = vlm_gbnf_compile((const char *) data + 1, slen - 1, &out, &err);

    } else if (text == 0x02) {
        rc = vlm_schema_compile_regex((const char *) data + 1, slen - 1, &out,
                                      &err);

    } else {
        s = slen ? json_loadb((const char *) data, slen, 0, NULL) : NULL;

        if (slen && s == NULL) {
            return 0;
        }

        rc = fuzz_compile(s, &out, &err);
        json_decref(s);
    }

    if (rc != VLM_OK) {
        fuzz_check(err.msg[0] != '\0');
        return 0;
    }

    fuzz_check(vlm_grammar_open(&g, out.prog, out.len, &err) == VLM_OK);

    vlm_matcher_reset(matcher, &g);
    end = VOCAB;        /* out of the vocabulary: never set */

    for (i = 0; i < dlen; i++) {
        (void) vlm_matcher_mask(matcher, 0, &end, 1, &mask);
        allowed = (mask[d[i] >> 5] >> (d[i] & 31)) & 1;

        ok = vlm_matcher_feed(matcher, (const char *) d + i, 1);
        fuzz_check(ok == allowed);

        if (!ok) {
            break;
        }

        fuzz_plan(matcher);

        if (vlm_matcher_complete(matcher)) {
            fuzz_check(vlm_matcher_distance(matcher) == 0);

            if (!text && g.nodes[g.hdr->root].kind != VLM_GNODE_TOOLCALLS) {
                doc = json_loadb((const char *) d, i + 1, JSON_DECODE_ANY,
                                 NULL);
                fuzz_check(doc != NULL);
                json_decref(doc);
            }
        }
    }

    free(out.prog);

    return 0;
}
