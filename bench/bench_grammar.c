/*
 * The cost of constrained decoding: the token trie over Qwen2's 151k
 * vocabulary (build time, nodes), then the per-token mask along random
 * documents of a few grammars, JSON schemas and GBNF grammars (each
 * token drawn among the allowed ones, so strings run long: the mask's
 * worst case, most of the vocabulary stays allowed), each document a
 * request of max_tokens --tokens + 64, its budget counted from there
 * again at each new document.  With --model (a
 * bench_checkpoint directory), decode steps of that model are timed
 * interleaved with the masks and the mask is printed as a share of a
 * step.  Each grammar's compile time (the median of 21) and its masks'
 * mean, median, 99th percentile and worst are printed, in wall time and
 * in the thread's CPU time (which a shared machine's preemption does not
 * inflate); a schema the compiler refuses is reported as refused.  After
 * the built-in grammars, every schema of the corpus folder (t/085's,
 * tests/fixtures/schemas/accepted); the last lines name the grammars
 * whose masks' 99th percentile of CPU time is over the goal of 100 us,
 * at the first document or at the second.  --slow US prints every mask
 * of more CPU time than that with the end of its document.
 *
 *   bench_grammar [--tokenizer DIR] [--model DIR] [--threads N]
 *                 [--tokens N] [--corpus DIR] [--slow US]
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/vlm.h"
#include "api/vlm_gbnf.h"
#include "api/vlm_schema.h"
#include "grammar/vlm_grammar.h"
#include "text/vlm_tokenizer.h"
#include "bench_stats.h"


static const char  *schemas[] = {
    NULL,
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":"
    "{\"type\":\"string\"}},\"address\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}},"
    "\"required\":[\"city\",\"zip\"]}},\"required\":[\"name\",\"age\","
    "\"tags\",\"address\"]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
    "{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"},\"kind\":"
    "{\"enum\":[\"point\",\"corner\",\"centre\"]}},\"required\":[\"x\","
    "\"y\",\"kind\"]}}",
    /* alternatives that start alike: told apart further on */
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"object\","
    "\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":"
    "\"number\"}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":"
    "false},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"
    "\"rect\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}},"
    "\"required\":[\"kind\",\"w\",\"h\"],\"additionalProperties\":false}"
    "]}}",
    "{\"type\":\"object\",\"properties\":{\"n\":{\"anyOf\":[{\"type\":"
    "\"integer\"},{\"type\":\"number\"}]},\"s\":{\"type\":\"string\"}},"
    "\"required\":[\"n\",\"s\"]}",
    /* patterns and the formats made of them: DFAs */
    "{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\","
    "\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"},\"mail\":{\"type\":"
    "\"string\",\"format\":\"email\"},\"host\":{\"type\":\"string\","
    "\"format\":\"hostname\"},\"ip\":{\"type\":\"string\",\"format\":"
    "\"ipv4\"},\"age\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":130}},\"required\":[\"zip\",\"mail\",\"host\",\"ip\","
    "\"age\"]}",
    /*
     * GBNF grammars (vlm_gbnf_compile): recursive ones, the automaton's
     * nodes, and a regular one, one expression, whose character class
     * also walks the whole trie at each token
     */
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\"\n"
    "         | \"null\"\n"
    "object ::= \"{\" (pair (\",\" pair)*)? \"}\"\n"
    "pair   ::= string \":\" value\n"
    "array  ::= \"[\" (value (\",\" value)*)? \"]\"\n"
    "string ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n",
    "root ::= \"[\" str (\",\" str)* \"]\"\n"
    "str  ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\n",
    "root   ::= expr\n"
    "expr   ::= term (\"+\" term)*\n"
    "term   ::= factor (\"*\" factor)*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\"\n",
    /*
     * counted repetitions: a DFA state per count, each with its own mask
     * (a hostname label of up to 63 characters, the formats built of
     * them, a word of 2 to 10 letters, and one under a maxLength)
     */
    "{\"type\":\"object\",\"properties\":{\"label\":{\"type\":"
    "\"string\",\"pattern\":\"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$\"},"
    "\"word\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2,10}$\"}},"
    "\"required\":[\"label\",\"word\"]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":"
    "\"hostname\"},\"minItems\":4}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":"
    "\"email\"},\"minItems\":4}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":"
    "\"uri\"},\"minItems\":4}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":"
    "\"^[a-z ]+$\",\"maxLength\":40},\"minItems\":4}",
};

static const char  *schema_names[] = {
    "json_object", "nested object", "array of objects", "tagged union",
    "int or number", "patterns, formats", "GBNF: JSON", "GBNF: strings",
    "GBNF: arithmetic", "label{1,63}, [a-z]{2,10}", "hostnames", "emails",
    "uris", "pattern, maxLength"
};

#define BENCH_BUILTIN   (sizeof(schemas) / sizeof(schemas[0]))
#define BENCH_MAX       (BENCH_BUILTIN + 256)
#define BENCH_GOAL      100.0       /* us, a mask's p99 */

#define BENCH_COMPILES  21


static uint64_t  rng = 0x9e3779b97f4a7c15ull;

static uint32_t
draw(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;

    return (uint32_t) (rng % n);
}


/* the corpus' schemas after the built-in ones: their texts and names */
static int
bench_corpus(const char *dir, const char **texts, const char **names)
{
    int              i, n, k;
    char             path[4096];
    json_t          *js;
    struct dirent  **list;

    n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "bench_grammar: no corpus at %s\n", dir);
        return 0;
    }

    k = 0;

    for (i = 0; i < n; i++) {
        if (strstr(list[i]->d_name, ".json") != NULL
            && BENCH_BUILTIN + k < BENCH_MAX)
        {
            snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
            js = json_load_file(path, 0, NULL);

            if (js != NULL) {
                texts[k] = json_dumps(js, JSON_COMPACT);
                names[k] = strdup(list[i]->d_name);
                json_decref(js);

                if (texts[k] != NULL && names[k] != NULL) {
                    *strstr((char *) names[k], ".json") = '\0';
                    k++;
                }
            }
        }

        free(list[i]);
    }

    free(list);

    return k;
}


static double
bench_cpu_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);

    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


int
main(int argc, char **argv)
{
    int                  i, k, vocab, threads, n_tokens, pick, id, s, c;
    int                  measured, pass, gbnf, n_all, n_slow;
    int                  max_tokens, n_gen;
    int32_t              eos, tok;
    size_t               n, len, *lens;
    double               t0, c0, t_trie, t_mask, t_max, t_dec, t_all;
    double              *t_tok, *t_cpu;
    double               t_comp[BENCH_COMPILES], med, lo, hi;
    json_t              *js;
    const char          *tok_dir, *model_dir, *corpus, **bytes, *b;
    const char          *texts[BENCH_MAX], *names[BENCH_MAX];
    const char          *over[BENCH_MAX];
    double               p99[2], over_p99[BENCH_MAX][2];
    const uint32_t      *mask;
    vlm_error_t          err;
    vlm_trie_t          *trie;
    vlm_grammar_t        g;
    vlm_matcher_t       *m;
    vlm_tokenizer_t     *tk;
    vlm_schema_out_t     out;
    vlm_model_t         *model;
    vlm_seq_t           *seq;
    vlm_model_params_t   prm;
    int32_t              ids[8];
    size_t               n_doc;
    double               slow;
    static char          doc[65536];

    tok_dir = "tests/fixtures/tokenizer/qwen";
    model_dir = NULL;
    threads = 2;
    n_tokens = 400;
    corpus = "tests/fixtures/schemas/accepted";
    slow = 0.0;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tokenizer") == 0) {
            tok_dir = argv[i + 1];

        } else if (strcmp(argv[i], "--model") == 0) {
            model_dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--tokens") == 0) {
            n_tokens = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--corpus") == 0) {
            corpus = argv[i + 1];

        } else if (strcmp(argv[i], "--slow") == 0) {
            slow = atof(argv[i + 1]) / 1e6;

        } else {
            fprintf(stderr, "bench_grammar: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (vlm_tokenizer_load(&tk, tok_dir, &err) != VLM_OK) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }

    vocab = vlm_tokenizer_vocab_size(tk);
    eos = vlm_tokenizer_eos_id(tk);

    bytes = calloc((size_t) vocab, sizeof(char *));
    lens = calloc((size_t) vocab, sizeof(size_t));
    t_tok = calloc((size_t) n_tokens, sizeof(double));
    t_cpu = calloc((size_t) n_tokens, sizeof(double));

    if (bytes == NULL || lens == NULL || t_tok == NULL || t_cpu == NULL
        || n_tokens < 1)
    {
        fprintf(stderr, "bench_grammar: no memory\n");
        return 1;
    }

    for (id = 0; id < vocab; id++) {
        bytes[id] = vlm_tokenizer_token_bytes(tk, id, &lens[id]);

        if (bytes[id] == NULL || vlm_tokenizer_is_special(tk, id)) {
            bytes[id] = "";
            lens[id] = 0;
        }
    }

    t0 = bench_now();
    if (vlm_trie_build(&trie, vocab, bytes, lens, &err) != VLM_OK
        || vlm_matcher_create(&m, trie, &err) != VLM_OK)
    {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    t_trie = bench_now() - t0;

    printf("bench_grammar: %s, %d tokens\n", tok_dir, vocab);
    printf("  token trie                 %8.1f ms  (%zu nodes, once at "
           "load)\n", t_trie * 1e3, vlm_trie_nodes(trie));

    model = NULL;
    seq = NULL;
    t_dec = 0.0;

    if (model_dir != NULL) {
        vlm_model_params_default(&prm);
        prm.n_threads = threads;
        prm.max_seqs = 1;
        prm.max_seq_len = n_tokens * 4 + 64;

        if (vlm_model_load(&model, model_dir, &prm, &err) != VLM_OK
            || vlm_seq_init(model, &seq, &err) != VLM_OK)
        {
            fprintf(stderr, "bench_grammar: %s (run bench_checkpoint "
                    "first)\n", err.msg);
            return 1;
        }

        for (i = 0; i < 8; i++) {
            ids[i] = (i * 7331) % vlm_model_info(model)->vocab_size;
        }

        if (vlm_seq_prefill(seq, ids, 8, NULL, 0, NULL, &err) != VLM_OK) {
            fprintf(stderr, "bench_grammar: %s\n", err.msg);
            return 1;
        }
    }

    for (i = 0; i < (int) BENCH_BUILTIN; i++) {
        texts[i] = schemas[i];
        names[i] = schema_names[i];
    }

    n_all = (int) BENCH_BUILTIN
            + bench_corpus(corpus, texts + BENCH_BUILTIN,
                           names + BENCH_BUILTIN);

    /*
     * Each document is a request of its own with max_tokens of the run's
     * tokens and 64 more: the budget is that less the document's tokens
     * so far, from max_tokens again at each new document (the bench
     * draws documents back to back until its tokens are spent).
     */
    max_tokens = n_tokens + 64;

    t_all = 0.0;
    k = 0;
    measured = 0;
    n_slow = 0;

    for (s = 0; s < n_all; s++) {
        gbnf = texts[s] != NULL && strncmp(texts[s], "root ", 5) == 0;
        js = texts[s] && !gbnf ? json_loads(texts[s], 0, NULL) : NULL;

        for (c = 0; c < BENCH_COMPILES; c++) {
            t0 = bench_now();

            if ((gbnf ? vlm_gbnf_compile(texts[s], strlen(texts[s]),
                                         &out, &err)
                      : vlm_schema_compile(js, &out, &err))
                != VLM_OK)
            {
                break;
            }

            t_comp[c] = bench_now() - t0;

            if (c + 1 < BENCH_COMPILES) {
                free(out.prog);
            }
        }

        json_decref(js);

        if (c < BENCH_COMPILES) {
            printf("  %-25s refused: %s\n", names[s], err.msg);
            continue;
        }

        if (vlm_grammar_open(&g, out.prog, out.len, &err) != VLM_OK) {
            fprintf(stderr, "bench_grammar: %s\n", err.msg);
            return 1;
        }

        bench_stats(t_comp, BENCH_COMPILES, &med, &lo, &hi);

        /*
         * Twice: the second document finds the masks that the first one
         * kept for the schema's pattern states (the trie keeps them for
         * every request of the same schema), as a server's later requests
         * do.
         */
        for (pass = 0; pass < 2; pass++) {

        vlm_matcher_reset(m, &g);
        n_doc = 0;
        n_gen = 0;
        t_mask = 0.0;
        t_max = 0.0;

        for (i = 0; i < n_tokens; i++) {
            c0 = bench_cpu_now();
            t0 = bench_now();
            n = vlm_matcher_mask(m, (uint32_t) (max_tokens - n_gen), &eos,
                                 1, &mask);
            t0 = bench_now() - t0;
            t_cpu[i] = bench_cpu_now() - c0;

            t_mask += t0;
            t_max = t0 > t_max ? t0 : t_max;
            t_tok[i] = t0;
            if (slow > 0.0 && t_cpu[i] > slow) {
                len = vlm_min(n_doc, 60);
                printf("    slow: %s, %.0f us, %zu allowed, after \"%.*s\"\n",
                       names[s], t_cpu[i] * 1e6, n, (int) len,
                       doc + n_doc - len);
            }

            if (model != NULL && pass == 0 && i < 4) {
                /* a decode step between the masks, as the engine does */
                tok = (int32_t) (i * 13 + 7);
                t0 = bench_now();
                if (vlm_decode(model, &seq, &tok, 1, &err) != VLM_OK) {
                    fprintf(stderr, "bench_grammar: %s\n", err.msg);
                    return 1;
                }
                t_dec += bench_now() - t0;
                k++;
            }

            pick = (int) draw((uint32_t) n);

            for (id = 0; id < vocab; id++) {
                if (((mask[id >> 5] >> (id & 31)) & 1) && pick-- == 0) {
                    break;
                }
            }

            if (id == eos || id == vocab) {
                /* a new request: its own budget again */
                n_doc = 0;
                n_gen = 0;
                vlm_matcher_reset(m, &g);
                continue;
            }

            n_gen++;

            b = vlm_tokenizer_token_bytes(tk, id, &len);

            if (n_doc + len <= sizeof(doc)) {
                memcpy(doc + n_doc, b, len);
                n_doc += len;
            }
            if (!vlm_matcher_feed(m, b, len)) {
                fprintf(stderr, "bench_grammar: token %d refused\n", id);
                return 1;
            }
        }

        qsort(t_tok, (size_t) n_tokens, sizeof(double), bench_cmp_double);
        qsort(t_cpu, (size_t) n_tokens, sizeof(double), bench_cmp_double);
        p99[pass] = t_cpu[(size_t) (n_tokens * 0.99)] * 1e6;

        if (pass == 1) {
            printf("  %-25s (again, the schema seen: CPU p50 %.1f, p99 %.1f, "
                   "max %.1f us)\n", "", t_cpu[n_tokens / 2] * 1e6,
                   t_cpu[(size_t) (n_tokens * 0.99)] * 1e6,
                   t_cpu[n_tokens - 1] * 1e6);
            break;
        }

        t_all += t_mask;
        measured++;

        printf("  mask, %-18s %8.1f us a token  (p50 %.1f, p99 %.1f, max "
               "%.1f us, %d tokens; compiled in %.1f us)\n",
               names[s], t_mask / n_tokens * 1e6,
               t_tok[n_tokens / 2] * 1e6,
               t_tok[(size_t) (n_tokens * 0.99)] * 1e6, t_max * 1e6,
               n_tokens, med * 1e6);
        printf("  %-25s (its thread's CPU time: p50 %.1f, p99 %.1f, max "
               "%.1f us)\n", "", t_cpu[n_tokens / 2] * 1e6,
               t_cpu[(size_t) (n_tokens * 0.99)] * 1e6,
               t_cpu[n_tokens - 1] * 1e6);
        }

        free(out.prog);

        if (p99[0] > BENCH_GOAL || p99[1] > BENCH_GOAL) {
            over[n_slow] = names[s];
            over_p99[n_slow][0] = p99[0];
            over_p99[n_slow][1] = p99[1];
            n_slow++;
        }
    }

    t_all /= n_tokens * (double) measured;

    printf("  masks' CPU p99 over %.0f us: %d of %d grammars\n", BENCH_GOAL,
           n_slow, measured);

    for (i = 0; i < n_slow; i++) {
        printf("    %-25s p99 %.1f us, again %.1f us\n", over[i],
               over_p99[i][0], over_p99[i][1]);
    }

    if (model != NULL) {
        t_dec /= k;
        printf("  decode step, %s   %8.1f ms  (%d threads)\n", model_dir,
               t_dec * 1e3, threads);
        printf("  mask / decode step         %8.2f %%  (goal: under 5 %%)\n",
               100.0 * t_all / t_dec);
        vlm_seq_free(seq);
        vlm_model_free(model);

    } else {
        printf("  (--model DIR of bench_checkpoint --shape 3b: the mask "
               "against a decode step)\n");
    }

    vlm_matcher_free(m);
    vlm_trie_free(trie);
    vlm_tokenizer_free(tk);

    for (i = (int) BENCH_BUILTIN; i < n_all; i++) {
        free((char *) texts[i]);
        free((char *) names[i]);
    }

    free(bytes);
    free(lens);
    free(t_tok);
    free(t_cpu);

    return 0;
}
