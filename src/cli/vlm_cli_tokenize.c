/*
 * vlm-cli tokenize, detokenize and template: the tokenizer and the chat
 * template of a model directory, from the command line.
 *
 *   vlm-cli tokenize --model DIR (--text STR | --file F) [--special-as-text]
 *   vlm-cli detokenize --model DIR [--skip-special] ID...
 *   vlm-cli template --model DIR --messages FILE.json
 *                    [--no-generation-prompt] [--vision-id]
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_cli.h"
#include "text/vlm_chat.h"
#include "text/vlm_jinja.h"
#include "text/vlm_tokenizer.h"


int vlm_cli_tokenize(int argc, char **argv);
int vlm_cli_detokenize(int argc, char **argv);
int vlm_cli_template(int argc, char **argv);


static vlm_tokenizer_t *
vlm_cli_load_tokenizer(const char *model)
{
    vlm_error_t       err;
    vlm_tokenizer_t  *tok;

    if (model == NULL) {
        vlm_cli_fail("--model DIR is required");
        return NULL;
    }

    if (vlm_tokenizer_load(&tok, model, &err) != VLM_OK) {
        vlm_cli_fail("%s", err.msg);
        return NULL;
    }

    return tok;
}


int
vlm_cli_tokenize(int argc, char **argv)
{
    int               i, rc;
    char             *text, *owned;
    size_t            len, n, k;
    int32_t          *ids;
    unsigned          flags;
    const char       *model, *file, *v;
    vlm_error_t       err;
    vlm_tok_work_t   *work;
    vlm_tokenizer_t  *tok;

    model = NULL;
    file = NULL;
    text = NULL;
    owned = NULL;
    flags = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0
            || strcmp(argv[i], "--text") == 0
            || strcmp(argv[i], "--file") == 0)
        {
            v = vlm_cli_opt_value(argc, argv, &i);
            if (v == NULL) {
                return 2;
            }

            if (argv[i - 1][2] == 'm') {
                model = v;
            } else if (argv[i - 1][2] == 't') {
                text = (char *) v;
            } else {
                file = v;
            }

        } else if (strcmp(argv[i], "--special-as-text") == 0) {
            flags |= VLM_TOK_SPECIAL_AS_TEXT;

        } else {
            return vlm_cli_fail("tokenize: unknown option %s", argv[i]);
        }
    }

    if ((text == NULL) == (file == NULL)) {
        return vlm_cli_fail("tokenize: give one of --text STR or --file F");
    }

    if (file != NULL) {
        owned = vlm_cli_read_file(file, &len);
        if (owned == NULL) {
            return vlm_cli_fail("%s: %s", file, strerror(errno));
        }

        text = owned;

    } else {
        len = strlen(text);
    }

    tok = vlm_cli_load_tokenizer(model);
    if (tok == NULL) {
        free(owned);
        return 1;
    }

    /* a token holds at least one byte */
    ids = malloc((len + 1) * sizeof(int32_t));
    rc = 1;
    work = NULL;

    if (ids == NULL) {
        vlm_cli_fail("no memory");

    } else if (vlm_tok_work_create(&work, tok, len + 1, &err) != VLM_OK
               || vlm_tokenizer_encode(tok, work, text, len, flags, ids,
                                       len + 1, &n, &err)
                  != VLM_OK)
    {
        vlm_cli_fail("%s", err.msg);

    } else {
        for (k = 0; k < n; k++) {
            printf(k ? " %d" : "%d", ids[k]);
        }

        printf("\n");
        rc = 0;
    }

    vlm_tok_work_free(work);
    vlm_tokenizer_free(tok);
    free(ids);
    free(owned);

    return rc;
}


int
vlm_cli_detokenize(int argc, char **argv)
{
    int               i, rc;
    long              v;
    char             *end, *out;
    size_t            n, len;
    int32_t          *ids;
    unsigned          flags;
    const char       *model;
    vlm_error_t       err;
    vlm_tokenizer_t  *tok;

    model = NULL;
    flags = 0;

    ids = malloc((size_t) argc * sizeof(int32_t));
    if (ids == NULL) {
        return vlm_cli_fail("no memory");
    }

    n = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0) {
            model = vlm_cli_opt_value(argc, argv, &i);
            if (model == NULL) {
                free(ids);
                return 2;
            }

        } else if (strcmp(argv[i], "--skip-special") == 0) {
            flags |= VLM_TOK_SKIP_SPECIAL;

        } else {
            errno = 0;
            v = strtol(argv[i], &end, 10);

            if (errno != 0 || *end != '\0' || end == argv[i] || v < 0
                || v > INT32_MAX)
            {
                free(ids);
                return vlm_cli_fail("detokenize: \"%s\" is not a token id",
                                    argv[i]);
            }

            ids[n++] = (int32_t) v;
        }
    }

    tok = vlm_cli_load_tokenizer(model);
    if (tok == NULL) {
        free(ids);
        return 1;
    }

    rc = 1;
    out = NULL;

    if (vlm_tokenizer_decode(tok, ids, n, flags, NULL, 0, &len, &err)
        != VLM_OK)
    {
        vlm_cli_fail("%s", err.msg);

    } else if ((out = malloc(len + 1)) == NULL) {
        vlm_cli_fail("no memory");

    } else if (vlm_tokenizer_decode(tok, ids, n, flags, out, len, &len, &err)
               != VLM_OK)
    {
        vlm_cli_fail("%s", err.msg);

    } else {
        fwrite(out, 1, len, stdout);
        rc = 0;
    }

    free(out);
    free(ids);
    vlm_tokenizer_free(tok);

    return rc;
}


/*
 * The model's chat template through the Jinja interpreter: json is an
 * array of messages or an object with "messages" (and "tools").
 */
static int
vlm_cli_template_jinja(vlm_tokenizer_t *tok, const char *file,
    const char *json, size_t len, unsigned flags)
{
    int               rc;
    json_t           *root, *client, *vars, *v;
    const char       *tmpl;
    json_error_t      jerr;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   out;

    tmpl = vlm_tokenizer_chat_template(tok);

    if (vlm_jinja_parse(&t, tmpl, strlen(tmpl), &err) != VLM_OK) {
        return vlm_cli_fail("the model's chat template: %s", err.msg);
    }

    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        vlm_jinja_free(t);
        return vlm_cli_fail("%s: line %d: %s", file, jerr.line, jerr.text);
    }

    client = json_object();
    vars = vlm_chat_template_vars(tok, flags);
    rc = 1;

    if (client == NULL || vars == NULL) {
        vlm_cli_fail("no memory");
        goto done;
    }

    v = json_is_array(root) ? root : json_object_get(root, "messages");
    if (v != NULL) {
        json_object_set(client, "messages", v);
    }

    /* transformers passes tools=None when there are none */
    v = json_is_array(root) ? NULL : json_object_get(root, "tools");
    json_object_set(client, "tools", v ? v : json_null());

    if (vlm_jinja_render(t, client, vars, NULL, &out, &err) != VLM_OK) {
        vlm_cli_fail("%s: %s", file, err.msg);

    } else {
        fwrite(out.text, 1, out.len, stdout);
        rc = 0;
    }

    vlm_jinja_out_free(&out);

done:

    json_decref(vars);
    json_decref(client);
    json_decref(root);
    vlm_jinja_free(t);

    return rc;
}


int
vlm_cli_template(int argc, char **argv)
{
    int                    i, rc, jinja;
    char                  *json, *out;
    size_t                 len, n;
    unsigned               flags;
    const char            *model, *file;
    const json_t          *tools;
    vlm_error_t            err;
    vlm_chat_json_t       *chat;
    vlm_tokenizer_t       *tok;
    const vlm_chat_msg_t  *msgs;

    model = NULL;
    file = NULL;
    jinja = 0;
    flags = VLM_CHAT_ADD_GENERATION_PROMPT;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0) {
            model = vlm_cli_opt_value(argc, argv, &i);
            if (model == NULL) {
                return 2;
            }

        } else if (strcmp(argv[i], "--messages") == 0) {
            file = vlm_cli_opt_value(argc, argv, &i);
            if (file == NULL) {
                return 2;
            }

        } else if (strcmp(argv[i], "--no-generation-prompt") == 0) {
            flags &= ~VLM_CHAT_ADD_GENERATION_PROMPT;

        } else if (strcmp(argv[i], "--vision-id") == 0) {
            flags |= VLM_CHAT_ADD_VISION_ID;

        } else if (strcmp(argv[i], "--jinja") == 0) {
            jinja = 1;

        } else {
            return vlm_cli_fail("template: unknown option %s", argv[i]);
        }
    }

    if (file == NULL) {
        return vlm_cli_fail("template: --messages FILE.json is required");
    }

    tok = vlm_cli_load_tokenizer(model);
    if (tok == NULL) {
        return 1;
    }

    if (vlm_tokenizer_chat_template(tok) == NULL) {
        vlm_tokenizer_free(tok);
        return vlm_cli_fail("%s: the model has no chat template", model);
    }

    json = vlm_cli_read_file(file, &len);
    if (json == NULL) {
        vlm_tokenizer_free(tok);
        return vlm_cli_fail("%s: %s", file, strerror(errno));
    }

    if (jinja
        || !vlm_chat_template_is_qwen2_vl(vlm_tokenizer_chat_template(tok)))
    {
        rc = vlm_cli_template_jinja(tok, file, json, len, flags);
        vlm_tokenizer_free(tok);
        free(json);
        return rc;
    }

    vlm_tokenizer_free(tok);

    rc = 1;
    out = NULL;
    chat = NULL;

    if (vlm_chat_parse_json(json, len, &chat, &err) != VLM_OK) {
        vlm_cli_fail("%s: %s", file, err.msg);
        goto done;
    }

    msgs = vlm_chat_json_messages(chat, &n);
    tools = vlm_chat_json_tools(chat);

    /* tools, tool calls and results as the server renders them */
    if (vlm_chat_render_tools(msgs, n, tools, flags, NULL, 0,
                              &len, NULL, NULL, 0, NULL, &err)
        != VLM_OK)
    {
        vlm_cli_fail("%s: %s", file, err.msg);
        goto done;
    }

    out = malloc(len + 1);
    if (out == NULL) {
        vlm_cli_fail("no memory");
        goto done;
    }

    if (vlm_chat_render_tools(msgs, n, tools, flags, out, len,
                              &len, NULL, NULL, 0, NULL, &err)
        != VLM_OK)
    {
        vlm_cli_fail("%s: %s", file, err.msg);
        goto done;
    }

    fwrite(out, 1, len, stdout);
    rc = 0;

done:

    free(out);
    free(json);
    vlm_chat_json_free(chat);

    return rc;
}
