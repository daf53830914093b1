/*
 * Unit tests of recursive GBNF grammars (api/vlm_gbnf.c compiles them to
 * SEQ, ANYOF and REPEAT nodes over REGEX nodes, grammar/ runs them):
 * balanced parentheses, arithmetic, nested lists, a small JSON and a
 * grammar whose expressions must end where the next rule begins, each
 * against a recursive-descent recognizer of its own: chosen documents,
 * random texts and one-byte edits of drawn documents accepted exactly
 * when the recognizer accepts them; the mask against feeding every token
 * alone along random documents, at budgets near the distance to the end;
 * random walks over the mask that always end complete within their
 * budget, and at the plan's budget; left recursion and grammars
 * without an end refused with the rule's name.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "api/vlm_gbnf.h"
#include "grammar/vlm_grammar.h"
#include "text/vlm_tokenizer.h"


#define VOCAB    512            /* the tokens of a grammar's alphabet */
#define TOK_MAX  4


/* recognizers: past what they read, or NULL */

typedef const char *(*ref_fn)(const char *p);


/* root ::= item*   item ::= "(" root ")" | "x" */
static const char *
ref_parens(const char *p)
{
    while (*p == 'x' || *p == '(') {
        if (*p++ == 'x') {
            continue;
        }

        p = ref_parens(p);

        if (p == NULL || *p != ')') {
            return NULL;
        }

        p++;
    }

    return p;
}


static const char *ref_expr(const char *p);


static const char *
ref_factor(const char *p)
{
    if (*p == '(') {
        p = ref_expr(p + 1);
        return (p != NULL && *p == ')') ? p + 1 : NULL;
    }

    if (*p < '0' || *p > '9') {
        return NULL;
    }

    while (*p >= '0' && *p <= '9') {
        p++;
    }

    return p;
}


static const char *
ref_term(const char *p)
{
    p = ref_factor(p);

    while (p != NULL && *p == '*') {
        p = ref_factor(p + 1);
    }

    return p;
}


/* expr ::= term ("+" term)*, term ::= factor ("*" factor)* */
static const char *
ref_expr(const char *p)
{
    p = ref_term(p);

    while (p != NULL && *p == '+') {
        p = ref_term(p + 1);
    }

    return p;
}


/* list ::= "[" (elem ("," elem)*)? "]"   elem ::= [a-z] | list */
static const char *
ref_list(const char *p)
{
    if (*p++ != '[') {
        return NULL;
    }

    if (*p == ']') {
        return p + 1;
    }

    for ( ;; ) {
        if (*p >= 'a' && *p <= 'z') {
            p++;

        } else {
            p = ref_list(p);
            if (p == NULL) {
                return NULL;
            }
        }

        if (*p == ']') {
            return p + 1;
        }

        if (*p++ != ',') {
            return NULL;
        }
    }
}


/* s ::= [a-z]* t   t ::= "a" "!" s | ".": ([a-z]* "a!")* [a-z]* "." */
static const char *
ref_bang(const char *p)
{
    const char  *s;

    for (s = p; *p != '.'; p++) {
        if (!((*p >= 'a' && *p <= 'z')
              || (*p == '!' && p > s && p[-1] == 'a')))
        {
            return NULL;
        }
    }

    return p + 1;
}


/* root ::= a "x"   a ::= "xy" a | "": (xy)* x */
static const char *
ref_tail(const char *p)
{
    while (p[0] == 'x' && p[1] == 'y') {
        p += 2;
    }

    return *p == 'x' ? p + 1 : NULL;
}


/* root ::= item* "a!"   item ::= "a" | "(" root ")" */
static const char *
ref_items_end(const char *p)
{
    for ( ;; ) {
        if (p[0] == 'a' && p[1] == '!') {
            return p + 2;
        }

        if (*p == 'a') {
            p++;
            continue;
        }

        if (*p != '(') {
            return NULL;
        }

        p = ref_items_end(p + 1);

        if (p == NULL || *p != ')') {
            return NULL;
        }

        p++;
    }
}


/* root ::= ("(" root ")"){1,2} | "x" */
static const char *
ref_times(const char *p)
{
    int  i;

    if (*p == 'x') {
        return p + 1;
    }

    for (i = 0; i < 2 && *p == '('; i++) {
        p = ref_times(p + 1);

        if (p == NULL || *p != ')') {
            return NULL;
        }

        p++;
    }

    return i > 0 ? p : NULL;
}


static const char *
ref_ws(const char *p)
{
    while (*p == ' ' || *p == '\n') {
        p++;
    }

    return p;
}


static const char *ref_value(const char *p);


static const char *
ref_string(const char *p)
{
    if (*p++ != '"') {
        return NULL;
    }

    while ((*p >= 'a' && *p <= 'z') || *p == ' ') {
        p++;
    }

    return *p == '"' ? p + 1 : NULL;
}


/* "[" ws (item ws ("," ws item ws)*)? close, item a value or a pair */
static const char *
ref_items(const char *p, char close, int pairs)
{
    p = ref_ws(p + 1);

    if (*p == close) {
        return p + 1;
    }

    for ( ;; ) {
        if (pairs) {
            p = ref_string(p);
            if (p == NULL) {
                return NULL;
            }

            p = ref_ws(p);

            if (*p++ != ':') {
                return NULL;
            }

            p = ref_ws(p);
        }

        p = ref_value(p);
        if (p == NULL) {
            return NULL;
        }

        p = ref_ws(p);

        if (*p == close) {
            return p + 1;
        }

        if (*p++ != ',') {
            return NULL;
        }

        p = ref_ws(p);
    }
}


static const char *
ref_value(const char *p)
{
    static const char  *words[] = { "true", "false", "null" };
    size_t              i;

    switch (*p) {
    case '{':
        return ref_items(p, '}', 1);
    case '[':
        return ref_items(p, ']', 0);
    case '"':
        return ref_string(p);
    default:
        break;
    }

    for (i = 0; i < 3; i++) {
        if (strncmp(p, words[i], strlen(words[i])) == 0) {
            return p + strlen(words[i]);
        }
    }

    p += *p == '-';

    if (*p == '0') {
        return p + 1;
    }

    if (*p < '1' || *p > '9') {
        return NULL;
    }

    while (*p >= '0' && *p <= '9') {
        p++;
    }

    return p;
}


static const char *
ref_json(const char *p)
{
    p = ref_value(ref_ws(p));

    return p ? ref_ws(p) : NULL;
}


static const struct {
    const char  *name;
    const char  *gbnf;
    const char  *alphabet;
    ref_fn       ref;
} grammars[] = {
    { "parens",
      "# balanced parentheses around x's\n"
      "root ::= item*\n"
      "item ::= \"(\" root \")\" | \"x\"\n",
      "()x", ref_parens },

    { "arith",
      "root   ::= expr\n"
      "expr   ::= term (\"+\" term)*\n"
      "term   ::= factor (\"*\" factor)*\n"
      "factor ::= [0-9]+ | \"(\" expr \")\"\n",
      "()+*019", ref_expr },

    { "lists",
      "root ::= list\n"
      "list ::= \"[\" (elem (\",\" elem)*)? \"]\"\n"
      "elem ::= [a-z] | list\n",
      "[],ab", ref_list },

    { "bang",
      "root ::= s\n"
      "s ::= [a-z]* t\n"
      "t ::= \"a\" \"!\" s | \".\"\n",
      "ab!.", ref_bang },

    { "tail",
      "root ::= a \"x\"\n"
      "a ::= \"xy\" a | \"\"\n",
      "xy", ref_tail },

    { "items",
      "root ::= item* \"a!\"\n"
      "item ::= \"a\" | \"(\" root \")\"\n",
      "a!()", ref_items_end },

    { "times",
      "root ::= (\"(\" root \")\"){1,2} | \"x\"\n",
      "()x", ref_times },

    { "json",
      "root   ::= ws value ws\n"
      "value  ::= object | array | string | number | \"true\" | \"false\"\n"
      "         | \"null\"\n"
      "object ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n"
      "pair   ::= string ws \":\" ws value ws\n"
      "array  ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
      "string ::= \"\\\"\" [a-z ]* \"\\\"\"\n"
      "number ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n"
      "ws     ::= [ \\n]*\n",
      "{}[],:\" \nab-019trueflsn", ref_json },
};

#define N_GRAMMARS  (sizeof(grammars) / sizeof(grammars[0]))


static int
ref_accepts(size_t k, const char *doc)
{
    const char  *p;

    p = grammars[k].ref(doc);

    return p != NULL && *p == '\0';
}


static uint64_t  rng = 0x9e3779b97f4a7c15ull;

static uint32_t
draw(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;

    return (uint32_t) (rng % n);
}


/* one of the n tokens from id "from" on that the mask allows, uniformly */
static int
pick_allowed(const uint32_t *mask, int from, size_t n)
{
    int  id, k;

    k = (int) draw((uint32_t) n);

    for (id = from; id < VOCAB; id++) {
        if (((mask[id >> 5] >> (id & 31)) & 1) && k-- == 0) {
            return id;
        }
    }

    fail_msg("fewer than %zu tokens allowed", n);
    return -1;
}


typedef struct {
    vlm_schema_out_t   out;
    vlm_grammar_t      g;
    vlm_matcher_t     *m;
    vlm_trie_t        *trie;
    char               pool[VOCAB * TOK_MAX];
    const char        *bytes[VOCAB];
    size_t             lens[VOCAB];
} gram_t;


/*
 * Grammar k and a vocabulary of its alphabet: id 0 the end, then every
 * byte alone, then random tokens of 2 to TOK_MAX bytes
 */
static void
gram_open_text(gram_t *gr, const char *gbnf, const char *a)
{
    int           id;
    size_t        i, n, len;
    vlm_error_t   err;

    n = strlen(a);

    if (vlm_gbnf_compile(gbnf, strlen(gbnf), &gr->out, &err) != VLM_OK) {
        fail_msg("%s: %s", gbnf, err.msg);
    }

    assert_int_equal(vlm_grammar_open(&gr->g, gr->out.prog, gr->out.len,
                                      &err), VLM_OK);

    gr->bytes[0] = "";
    gr->lens[0] = 0;

    for (id = 1; id < VOCAB; id++) {
        len = (size_t) id <= n ? 1 : 2 + draw(TOK_MAX - 1);

        for (i = 0; i < len; i++) {
            gr->pool[id * TOK_MAX + i] = (size_t) id <= n
                                         ? a[id - 1] : a[draw((uint32_t) n)];
        }

        gr->bytes[id] = &gr->pool[id * TOK_MAX];
        gr->lens[id] = len;
    }

    assert_int_equal(vlm_trie_build(&gr->trie, VOCAB, gr->bytes, gr->lens,
                                    &err), VLM_OK);
    assert_int_equal(vlm_matcher_create(&gr->m, gr->trie, &err), VLM_OK);
}


static void
gram_open(gram_t *gr, size_t k)
{
    gram_open_text(gr, grammars[k].gbnf, grammars[k].alphabet);
}


static void
gram_close(gram_t *gr)
{
    vlm_matcher_free(gr->m);
    vlm_trie_free(gr->trie);
    free(gr->out.prog);
}


static int
accepts(gram_t *gr, const char *doc)
{
    vlm_matcher_reset(gr->m, &gr->g);

    return vlm_matcher_feed(gr->m, doc, strlen(doc))
           && vlm_matcher_complete(gr->m);
}


static void
check_doc(gram_t *gr, size_t k, const char *doc)
{
    int  got, want;

    got = accepts(gr, doc);
    want = ref_accepts(k, doc);

    if (got != want) {
        fail_msg("%s: '%s': the grammar %s, the recognizer %s",
                 grammars[k].name, doc, got ? "accepts" : "refuses",
                 want ? "accepts" : "refuses");
    }
}


static void
test_documents(void **state)
{
    size_t  k, i;
    gram_t  gr;

    static const char  *docs[N_GRAMMARS][12] = {
        { "", "x", "()", "(x)(()x)", "xx(x(x))x", "((((((((x))))))))",
          "((", "(()", ")", "x)", "(x))(", NULL },
        { "1", "1+2*3", "(1+2)*3", "((1))", "12*(3+4)*5", "1+", "1++2",
          "(1", "()", "1(2)", "", NULL },
        { "[]", "[a]", "[a,[b,c]]", "[[],[[]],a]", "[[[[a]]]]", "[a,]",
          "[,a]", "[ab]", "[a", "a", "", NULL },
        { ".", "ab.", "bca!xy.", "a!a!.", "aa!b!.", "a!", "!.", "b!.",
          "a..", "", NULL },
        { "x", "xyx", "xyxyx", "", "xy", "xx", "xyxy", NULL },
        { "a!", "aa!", "(a!)a!", "a(aa!)(a!)a!", "a", "!", "(a!)", "a!a",
          NULL },
        { "x", "(x)", "(x)(x)", "((x)(x))", "", "()", "(x)(x)(x)", "xx",
          NULL },
        { "{}", " [ 1 , -20 , \"a b\" ] ", "{\"a\":{\"b\":[true,null]}}",
          "{ \"k\" : [ ] , \"x\":false}", "-0", "01", "[1,]", "{\"a\"}",
          "[tru]", "\"a\" \"b\"", "{\"a\":1 \"b\":2}", NULL },
    };

    for (k = 0; k < N_GRAMMARS; k++) {
        gram_open(&gr, k);

        for (i = 0; docs[k][i] != NULL; i++) {
            check_doc(&gr, k, docs[k][i]);
        }

        gram_close(&gr);
    }
}


/*
 * A walk: tokens drawn among those the mask allows at the budget left
 * (the end id once complete), until the end; it must end complete
 */
static size_t
walk(gram_t *gr, uint32_t budget, char *doc, size_t cap)
{
    int              id;
    size_t           n, len;
    int32_t          end;
    uint32_t         t;
    const uint32_t  *mask;

    end = 0;
    len = 0;
    vlm_matcher_reset(gr->m, &gr->g);

    for (t = budget; t > 0; t--) {
        n = vlm_matcher_mask(gr->m, t, &end, 1, &mask);

        if (n == 0) {
            doc[len] = '\0';
            fail_msg("no token allowed after '%s', %u left", doc, t);
        }

        id = pick_allowed(mask, 0, (size_t) n);

        if (id == 0) {
            break;
        }

        assert_true(len + gr->lens[id] < cap);
        memcpy(doc + len, gr->bytes[id], gr->lens[id]);
        len += gr->lens[id];
        assert_true(vlm_matcher_feed(gr->m, gr->bytes[id], gr->lens[id]));
    }

    doc[len] = '\0';

    if (!vlm_matcher_complete(gr->m)) {
        fail_msg("not complete in %u tokens: '%s'", budget, doc);
    }

    return len;
}


/*
 * Ambiguous grammars, read more ways at once than the matcher keeps
 * (VLM_G_STACKS): a^n b^m with m < n, whose n a's are n readings of the
 * b's to come, and a nesting whose every letter may open a level.  The
 * readings kept are those nearest an end, so walks under budgets near
 * the distance to the end always end complete, and valid; after twelve
 * a's a b is still allowed (the readings that owe one were once left out
 * for the first eight forks).
 */
static void
test_ambiguous(void **state)
{
    char        doc[4096];
    size_t      i, j, a, b;
    gram_t      gr;
    uint32_t    min;

    static const struct {
        const char  *gbnf;
        const char  *alphabet;
    } amb[] = {
        { "root ::= s\ns ::= \"a\" s | \"a\" s \"b\" | \"a\"\n", "ab" },
        { "root ::= t\nt ::= [a-c] t* \"x\" | [a-c]\n", "abcx" },
    };

    for (i = 0; i < sizeof(amb) / sizeof(amb[0]); i++) {
        gram_open_text(&gr, amb[i].gbnf, amb[i].alphabet);
        vlm_matcher_reset(gr.m, &gr.g);
        min = vlm_matcher_distance(gr.m);

        for (j = 0; j < 300; j++) {
            (void) walk(&gr, min + (uint32_t) (j % 24), doc, sizeof(doc));

            if (i == 0) {
                a = strspn(doc, "a");
                b = strspn(doc + a, "b");

                if (doc[a + b] != '\0' || a == 0 || b >= a) {
                    fail_msg("'%s' is not a^n b^m, m < n", doc);
                }
            }
        }

        if (i == 0) {
            vlm_matcher_reset(gr.m, &gr.g);
            assert_true(vlm_matcher_feed(gr.m, "aaaaaaaaaaaa", 12));
            assert_true(vlm_matcher_feed(gr.m, "b", 1));
            assert_true(vlm_matcher_complete(gr.m));
        }

        gram_close(&gr);
    }
}


/*
 * Exactness: random texts of the alphabet, and each walk's document and
 * one-byte edits of it (near misses), as the recognizer says
 */
static void
test_exact(void **state)
{
    char      doc[4096], edit[4096];
    size_t    k, i, j, n, len, at;
    gram_t    gr;
    uint32_t  min;
    json_t   *v;

    for (k = 0; k < N_GRAMMARS; k++) {
        gram_open(&gr, k);
        n = strlen(grammars[k].alphabet);

        for (i = 0; i < 4000; i++) {
            len = draw(12);

            for (j = 0; j < len; j++) {
                doc[j] = grammars[k].alphabet[draw((uint32_t) n)];
            }

            doc[len] = '\0';
            check_doc(&gr, k, doc);
        }

        vlm_matcher_reset(gr.m, &gr.g);
        min = vlm_matcher_distance(gr.m);

        for (i = 0; i < 60; i++) {
            len = walk(&gr, min + 1 + draw(60), doc, sizeof(doc));
            check_doc(&gr, k, doc);

            if (strcmp(grammars[k].name, "json") == 0) {
                v = json_loads(doc, JSON_DECODE_ANY, NULL);
                if (v == NULL) {
                    fail_msg("json: not JSON: '%s'", doc);
                }

                json_decref(v);
            }

            for (j = 0; j < 20 && len > 0; j++) {
                memcpy(edit, doc, len + 1);
                at = draw((uint32_t) len);

                switch (draw(3)) {
                case 0:
                    memmove(edit + at, edit + at + 1, len - at);
                    break;
                case 1:
                    edit[at] = grammars[k].alphabet[draw((uint32_t) n)];
                    break;
                default:
                    memmove(edit + at + 1, edit + at, len - at + 1);
                    edit[at] = grammars[k].alphabet[draw((uint32_t) n)];
                    break;
                }

                check_doc(&gr, k, edit);
            }
        }

        gram_close(&gr);
    }
}


/*
 * The mask at doc against feeding each token after it, at a budget;
 * returns how many are allowed and leaves the matcher after doc.  With
 * subset, a token fed may be left out of the mask (where deep stacks
 * fill the walk's log, vlm_g_compact), never the other way.
 */
static int
mask_vs_fed_in(gram_t *gr, const char *doc, size_t n_doc, uint32_t budget,
    const uint32_t **mask, int subset)
{
    int      id, ok, want;
    int32_t  end;

    end = 0;
    vlm_matcher_reset(gr->m, &gr->g);
    assert_true(vlm_matcher_feed(gr->m, doc, n_doc));
    (void) vlm_matcher_mask(gr->m, budget, &end, 1, mask);

    want = 0;

    for (id = 1; id < VOCAB; id++) {
        vlm_matcher_reset(gr->m, &gr->g);
        (void) vlm_matcher_feed(gr->m, doc, n_doc);
        ok = vlm_matcher_feed(gr->m, gr->bytes[id], gr->lens[id])
             && (budget == 0 || vlm_matcher_distance(gr->m) < budget);

        if (ok != (int) (((*mask)[id >> 5] >> (id & 31)) & 1)
            && !(subset && ok))
        {
            fail_msg("after '%.*s', budget %u, token '%.*s': fed %d, "
                     "mask %d", (int) n_doc, doc, budget,
                     (int) gr->lens[id], gr->bytes[id], ok, !ok);
        }

        want += ok;
    }

    vlm_matcher_reset(gr->m, &gr->g);
    (void) vlm_matcher_feed(gr->m, doc, n_doc);

    return want;
}


static int
mask_vs_fed(gram_t *gr, const char *doc, size_t n_doc, uint32_t budget,
    const uint32_t **mask)
{
    return mask_vs_fed_in(gr, doc, n_doc, budget, mask, 0);
}


static void
test_mask_brute(void **state)
{
    int              id, want, c, step;
    char             doc[2048];
    size_t           k, n_doc;
    gram_t           gr;
    uint32_t         seed, dist, budget;
    const uint32_t  *mask;

    for (k = 0; k < N_GRAMMARS; k++) {
        gram_open(&gr, k);

        for (seed = 0; seed < 6; seed++) {
            n_doc = 0;

            for (step = 0; step < 30; step++) {
                vlm_matcher_reset(gr.m, &gr.g);
                assert_true(vlm_matcher_feed(gr.m, doc, n_doc));
                dist = vlm_matcher_distance(gr.m);

                /* no limit, or a budget near the distance to the end */
                c = (int) draw(6);
                budget = c == 0 ? 0 : dist + (uint32_t) c - 1;
                budget = budget == 0 && c != 0 ? 1 : budget;

                want = mask_vs_fed(&gr, doc, n_doc, budget, &mask);

                if (want == 0) {
                    break;
                }

                id = pick_allowed(mask, 1, (size_t) want);

                if (n_doc + gr.lens[id] >= sizeof(doc)) {
                    break;
                }

                memcpy(doc + n_doc, gr.bytes[id], gr.lens[id]);
                n_doc += gr.lens[id];
            }
        }

        gram_close(&gr);
    }
}


/* walks at budgets from the fewest bytes to the end on: always complete */
static void
test_walks(void **state)
{
    char      doc[4096];
    size_t    k, i;
    gram_t    gr;
    uint32_t  min;

    for (k = 0; k < N_GRAMMARS; k++) {
        gram_open(&gr, k);
        vlm_matcher_reset(gr.m, &gr.g);
        min = vlm_matcher_distance(gr.m);

        for (i = 0; i < 200; i++) {
            (void) walk(&gr, min + (uint32_t) (i % 16) + (min == 0),
                        doc, sizeof(doc));
            check_doc(&gr, k, doc);
        }

        gram_close(&gr);
    }
}


/*
 * The engine's rule where the bound in bytes does not fit (the budget
 * less than the bytes to the end, the tokens of the plan within it): any
 * token the grammar allows unless the plan after it does not fit in what
 * is left, then the plan's first token.  Walks at the plan's budget from
 * the start, after a few free tokens, end complete.
 */
static void
walk_tight(gram_t *gr, size_t k, uint32_t free_tokens, char *doc,
    size_t cap)
{
    int              id, tight;
    size_t           n, len;
    int32_t          end, first;
    uint32_t         t, plan;
    const uint32_t  *mask;

    end = 0;
    len = 0;
    vlm_matcher_reset(gr->m, &gr->g);

    /* a few tokens drawn freely, then the tightest budget there is */
    for (t = 0; t < free_tokens; t++) {
        n = vlm_matcher_mask(gr->m, 0, &end, 1, &mask);
        id = pick_allowed(mask, 0, (size_t) n);

        if (id == 0 || len + gr->lens[id] >= cap) {
            break;
        }

        memcpy(doc + len, gr->bytes[id], gr->lens[id]);
        len += gr->lens[id];
        assert_true(vlm_matcher_feed(gr->m, gr->bytes[id], gr->lens[id]));
    }

    plan = vlm_matcher_plan(gr->m, &first);
    assert_true(plan != VLM_GRAMMAR_NONE);
    assert_true(plan <= vlm_matcher_distance(gr->m));

    for (t = plan + 1; t > 0; t--) {
        tight = 0;
        n = vlm_matcher_mask(gr->m, t > 1 ? t - 1 : 1, &end, 1, &mask);

        if (n == 0) {
            n = vlm_matcher_mask(gr->m, 0, &end, 1, &mask);
            tight = vlm_matcher_plan(gr->m, &first) <= t;
            assert_true(tight && first >= 0);
        }

        id = pick_allowed(mask, 0, (size_t) n);

        if (id == 0) {
            break;
        }

        if (tight
            && vlm_matcher_plan_after(gr->m, gr->bytes[id], gr->lens[id])
               > t - 1)
        {
            id = first;
        }

        assert_true(len + gr->lens[id] < cap);
        memcpy(doc + len, gr->bytes[id], gr->lens[id]);
        len += gr->lens[id];
        assert_true(vlm_matcher_feed(gr->m, gr->bytes[id], gr->lens[id]));
    }

    doc[len] = '\0';

    if (!vlm_matcher_complete(gr->m)) {
        fail_msg("%s: not complete in the plan's %u tokens: '%s'",
                 grammars[k].name, plan, doc);
    }

    check_doc(gr, k, doc);
}


static void
test_plan(void **state)
{
    char    doc[4096];
    size_t  k, i;
    gram_t  gr;

    for (k = 0; k < N_GRAMMARS; k++) {
        gram_open(&gr, k);

        for (i = 0; i < 100; i++) {
            walk_tight(&gr, k, (uint32_t) (i % 12), doc, sizeof(doc));
        }

        gram_close(&gr);
    }
}


/* the stack's limit: nesting as deep as it holds, no deeper */
static void
test_depth(void **state)
{
    int           i, n, ok;
    char          doc[512];
    gram_t        gr;
    const char   *p;

    gram_open(&gr, 2);
    assert_string_equal(grammars[2].name, "lists");

    for (n = 1; n < 100; n++) {
        for (i = 0; i < n; i++) {
            doc[i] = '[';
            doc[2 * n - 1 - i] = ']';
        }

        doc[2 * n] = '\0';
        ok = accepts(&gr, doc);

        if (!ok) {
            break;
        }

        /* the recognizer agrees wherever the matcher takes it */
        p = ref_list(doc);
        assert_true(p != NULL && *p == '\0');
    }

    /* a nested list takes a frame a level: about 60 levels */
    assert_true(n > 30 && n <= VLM_GRAMMAR_MAX_DEPTH);

    /* at the limit, the mask still leads to an end */
    vlm_matcher_reset(gr.m, &gr.g);
    assert_true(vlm_matcher_feed(gr.m, doc, (size_t) n - 1));
    assert_true(vlm_matcher_distance(gr.m) == (uint32_t) n - 1);

    gram_close(&gr);
}


static void
test_refused(void **state)
{
    size_t             i;
    vlm_error_t        err;
    vlm_schema_out_t   out;

    static const struct {
        const char  *gbnf;
        const char  *msg;
    } bad[] = {
        { "root ::= expr\nexpr ::= expr \"+\" term | term\n"
          "term ::= [0-9]+", "rule 'expr': it refers to itself before any "
          "text (left recursion)" },
        { "root ::= a\na ::= b | \"y\"\nb ::= a \"z\"", "left recursion" },
        { "root ::= a\na ::= \"x\"? [ ]* a \"y\" | \"z\"",
          "rule 'a': it refers to itself before any text" },
        { "root ::= \"a\" root", "rule 'root': it has no finite text" },
        { "root ::= \"(\" a \")\"\na ::= b\nb ::= \"[\" a \"]\"",
          "has no finite text" },
        { "root ::= \"(\" root \")\" | x", "no rule named 'x'" },
        { "root ::= (\"(\" root \")\"){300} | \"x\"", "0 to 256 times" },
        { "root ::= (\"(\" root \")\"){3,2} | \"x\"", "0 to 256 times" },
        { "root ::= (\"(\" root \")\"){2 3} | \"x\"", "0 to 256 times" },
        { "root ::= \"(\" root ) | \"x\"", "an unexpected ')'" },
        { "root ::= (\"(\" root | \"x\"", "a '(' without its ')'" },
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (vlm_gbnf_compile(bad[i].gbnf, strlen(bad[i].gbnf), &out, &err)
            == VLM_OK)
        {
            free(out.prog);
            fail_msg("compiled: %s", bad[i].gbnf);
        }

        if (strstr(err.msg, bad[i].msg) == NULL) {
            fail_msg("%s: '%s', not '%s'", bad[i].gbnf, err.msg,
                     bad[i].msg);
        }

        assert_null(out.prog);
    }
}


/*
 * Random grammars of three rules over a soup of GBNF's pieces: each is
 * compiled or refused with a message; a compiled one is a valid program
 * whose mask allows only tokens that feeding accepts, at budgets near the
 * end, along random documents (all of them but where deep stacks fill
 * the walk's log).  (Completion within the budget is not claimed
 * of them: a grammar that reads a text more than VLM_G_STACKS ways at
 * once, as some of these do, may lose the reading that ends.)
 */
static void
test_random_grammars(void **state)
{
    int              i, j, n_ok, step, want, id;
    char             text[512], doc[4096];
    size_t           len, k, n_doc;
    gram_t           gr;
    uint32_t         dist, budget;
    vlm_error_t      err;
    vlm_schema_out_t out;
    const uint32_t  *mask;

    static const char  *soup[] = {
        "\"x\" ", "\"y\" ", "\"xy\" ", "[xy] ", "[^x] ", ". ", "a ", "b ",
        "root ", "( ", ") ", "| ", "* ", "+ ", "? ", "{1,2} ", "{2} ",
        "{0,} ", "\"\" ", "\"x\" ", "a ", "b ",
    };
    static const char  *names[] = { "root", "a", "b" };

    n_ok = 0;

    for (i = 0; i < 3000; i++) {
        len = 0;

        for (k = 0; k < 3; k++) {
            len += (size_t) snprintf(text + len, sizeof(text) - len,
                                     "%s ::= ", names[k]);

            for (j = (int) draw(7) + 1; j > 0; j--) {
                len += (size_t) snprintf(text + len, sizeof(text) - len,
                                         "%s",
                                         soup[draw(sizeof(soup)
                                                   / sizeof(soup[0]))]);
            }

            text[len++] = '\n';
            text[len] = '\0';
        }

        if (vlm_gbnf_compile(text, len, &out, &err) != VLM_OK) {
            assert_null(out.prog);
            assert_true(err.msg[0] != '\0');
            continue;
        }

        free(out.prog);
        n_ok++;

        /* a quantifier where nothing precedes it is literal text */
        gram_open_text(&gr, text, "xyz{},012");

        for (j = 0; j < 2; j++) {
            n_doc = 0;

            for (step = 0; step < 10; step++) {
                vlm_matcher_reset(gr.m, &gr.g);
                assert_true(vlm_matcher_feed(gr.m, doc, n_doc));
                dist = vlm_matcher_distance(gr.m);
                budget = draw(2) ? 0 : dist + draw(3) + (dist == 0);

                (void) mask_vs_fed_in(&gr, doc, n_doc, budget, &mask, 1);

                for (id = 1, want = 0; id < VOCAB; id++) {
                    want += (mask[id >> 5] >> (id & 31)) & 1;
                }

                if (want == 0) {
                    break;
                }

                id = pick_allowed(mask, 1, (size_t) want);

                memcpy(doc + n_doc, gr.bytes[id], gr.lens[id]);
                n_doc += gr.lens[id];
            }
        }

        gram_close(&gr);
    }

    /* enough of them compile to mean something */
    assert_true(n_ok > 300);
}


/*
 * Qwen2's vocabulary (tests/fixtures/tokenizer/qwen): the mask of a JSON
 * grammar and of a markup grammar, whose texts keep masks for their
 * states (vlm_g_inner_mask) and walk the paths to a match, against
 * feeding each token alone (those with a byte that ends a text, and a
 * fifth of the others in turn) along random documents, at budgets near
 * the end
 */
static void
test_mask_qwen(void **state)
{
    int                id, vocab, step, want, ok, on;
    char               doc[8192];
    size_t             i, n_doc, *lens;
    int32_t            end;
    uint32_t           dist, budget;
    vlm_error_t        err;
    vlm_trie_t        *trie;
    vlm_grammar_t      g;
    vlm_matcher_t     *m;
    vlm_tokenizer_t   *tk;
    vlm_schema_out_t   out;
    const char       **bytes;
    const uint32_t    *mask;

    static const char  *gbnf[] = {
        "root   ::= value\n"
        "value  ::= object | array | string | \"true\" | \"null\"\n"
        "object ::= \"{\" (pair (\",\" pair)*)? \"}\"\n"
        "pair   ::= string \":\" value\n"
        "array  ::= \"[\" (value (\",\" value)*)? \"]\"\n"
        "string ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\n",
        "root ::= \"<\" tag\n"
        "tag  ::= [a-z]+ \">\" (text | \"<\" tag)* \"</\" [a-z]+ \">\"\n"
        "text ::= [^<]+\n",
    };

    assert_int_equal(vlm_tokenizer_load(&tk, "tests/fixtures/tokenizer/qwen",
                                        &err), VLM_OK);

    vocab = vlm_tokenizer_vocab_size(tk);
    end = vlm_tokenizer_eos_id(tk);
    bytes = calloc((size_t) vocab, sizeof(char *));
    lens = calloc((size_t) vocab, sizeof(size_t));
    assert_true(bytes != NULL && lens != NULL);

    for (id = 0; id < vocab; id++) {
        bytes[id] = vlm_tokenizer_token_bytes(tk, id, &lens[id]);

        if (bytes[id] == NULL || vlm_tokenizer_is_special(tk, id)) {
            bytes[id] = "";
            lens[id] = 0;
        }
    }

    assert_int_equal(vlm_trie_build(&trie, vocab, bytes, lens, &err),
                     VLM_OK);
    assert_int_equal(vlm_matcher_create(&m, trie, &err), VLM_OK);

    for (i = 0; i < sizeof(gbnf) / sizeof(gbnf[0]); i++) {
        assert_int_equal(vlm_gbnf_compile(gbnf[i], strlen(gbnf[i]), &out,
                                          &err), VLM_OK);
        assert_int_equal(vlm_grammar_open(&g, out.prog, out.len, &err),
                         VLM_OK);
        n_doc = 0;

        for (step = 0; step < 12; step++) {
            vlm_matcher_reset(m, &g);
            assert_true(vlm_matcher_feed(m, doc, n_doc));
            dist = vlm_matcher_distance(m);
            budget = step % 2 ? 0 : dist + 1 + draw(3);
            (void) vlm_matcher_mask(m, budget, &end, 1, &mask);

            want = 0;

            for (id = 0; id < vocab; id++) {
                on = (mask[id >> 5] >> (id & 31)) & 1;
                want += on;

                if (lens[id] == 0
                    || (id % 5 != step % 5
                        && strpbrk(bytes[id], "\"\\<>") == NULL))
                {
                    continue;
                }

                vlm_matcher_reset(m, &g);
                (void) vlm_matcher_feed(m, doc, n_doc);
                ok = vlm_matcher_feed(m, bytes[id], lens[id])
                     && (budget == 0 || vlm_matcher_distance(m) < budget);

                if (ok != on) {
                    fail_msg("after '%.*s', budget %u, token %d '%.*s': "
                             "fed %d, mask %d", (int) n_doc, doc, budget, id,
                             (int) lens[id], bytes[id], ok, on);
                }
            }

            /* on with one the mask allows, the end aside */
            want = (int) draw((uint32_t) want);

            for (id = 0; id < vocab; id++) {
                if (((mask[id >> 5] >> (id & 31)) & 1) && want-- == 0) {
                    break;
                }
            }

            if (id == vocab || id == end
                || n_doc + lens[id] >= sizeof(doc))
            {
                break;
            }

            memcpy(doc + n_doc, bytes[id], lens[id]);
            n_doc += lens[id];
        }

        free(out.prog);
    }

    vlm_matcher_free(m);
    vlm_trie_free(trie);
    vlm_tokenizer_free(tk);
    free(bytes);
    free(lens);
}


/*
 * A chain of 200 rules that each only name the next: no step of the
 * matcher a rule (a byte has VLM_G_RETRIES of them)
 */
static void
test_aliases(void **state)
{
    int      i;
    char    *text;
    size_t   len;
    gram_t   gr;

    text = malloc(8192);
    assert_non_null(text);

    len = (size_t) snprintf(text, 8192, "root ::= a0\n");

    for (i = 0; i < 199; i++) {
        len += (size_t) snprintf(text + len, 8192 - len, "a%d ::= a%d\n", i,
                                 i + 1);
    }

    snprintf(text + len, 8192 - len, "a199 ::= \"(\" root \")\" | \"x\"\n");

    gram_open_text(&gr, text, "()x");

    assert_true(accepts(&gr, "x"));
    assert_true(accepts(&gr, "((x))"));
    assert_false(accepts(&gr, "(x"));
    assert_false(accepts(&gr, "()"));

    gram_close(&gr);
    free(text);
}


/* a regular grammar is still one expression: one REGEX node */
static void
test_regular(void **state)
{
    vlm_error_t        err;
    vlm_grammar_t      g;
    vlm_schema_out_t   out;

    static const char  *gbnf = "root ::= a (\",\" a)*\na ::= [0-9]+";

    assert_int_equal(vlm_gbnf_compile(gbnf, strlen(gbnf), &out, &err),
                     VLM_OK);
    assert_int_equal(vlm_grammar_open(&g, out.prog, out.len, &err), VLM_OK);
    assert_int_equal(g.hdr->n_nodes, 1);
    assert_int_equal(g.nodes[0].kind, VLM_GNODE_REGEX);

    free(out.prog);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_mask_brute),
        cmocka_unit_test(test_walks),
        cmocka_unit_test(test_ambiguous),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_random_grammars),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_mask_qwen),
        cmocka_unit_test(test_regular),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
