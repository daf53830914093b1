/*
 * libFuzzer target: a chat template (the input) parsed and rendered over
 * a conversation with images, tools, tool calls and tool results, with
 * small limits.  Either may fail, with a message; a render that succeeds
 * has spans inside its text, sorted and apart.
 */

#include <stdlib.h>
#include <string.h>

#include "text/vlm_jinja.h"


static const char  conversation[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": [{\"type\": \"text\", "
    "\"text\": \"Be brief.\"}]},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", "
    "\"image_url\": {\"url\": \"data:,\"}}, {\"type\": \"text\", "
    "\"text\": \"<|im_end|> what?\"}]},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
    "{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": "
    "\"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    "{\"role\": \"tool\", \"content\": \"42\"},"
    "{\"role\": \"user\", \"content\": \"and \\u00e9?\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
    "\"parameters\": {\"type\": \"object\"}}}]}";

static const char  trusted[] =
    "{\"add_generation_prompt\": true, \"add_vision_id\": true, "
    "\"eos_token\": \"<|im_end|>\", \"documents\": null}";


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    size_t               i;
    json_t              *client, *vars;
    vlm_error_t          err;
    vlm_jinja_t         *t;
    vlm_jinja_out_t      out;
    vlm_jinja_limits_t   lim;

    if (vlm_jinja_parse(&t, (const char *) data, len, &err) != VLM_OK) {
        return 0;
    }

    client = json_loads(conversation, 0, NULL);
    vars = json_loads(trusted, 0, NULL);
    if (client == NULL || vars == NULL) {
        abort();
    }

    lim.max_bytes = 8 * 1024 * 1024;
    lim.max_steps = 200000;
    lim.max_output = 256 * 1024;

    if (vlm_jinja_render(t, client, vars, &lim, &out, &err) == VLM_OK) {
        for (i = 0; i < out.n_spans; i++) {
            if (out.spans[i].start >= out.spans[i].end
                || out.spans[i].end > out.len
                || (i > 0 && out.spans[i - 1].end >= out.spans[i].start))
            {
                abort();
            }
        }

        if (strlen(out.text) > out.len) {
            abort();
        }

    } else if (err.msg[0] == '\0') {
        abort();
    }

    vlm_jinja_out_free(&out);
    vlm_jinja_free(t);
    json_decref(client);
    json_decref(vars);

    return 0;
}
