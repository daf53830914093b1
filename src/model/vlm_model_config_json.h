/*
 * The config.json readers that the parsers of every family share
 * (vlm_model_config_json.c): a key looked up in a primary object, then
 * in a fallback, checked and range-limited, the first error kept in the
 * context with the section it was in.
 */

#ifndef VLM_MODEL_CONFIG_JSON_H
#define VLM_MODEL_CONFIG_JSON_H

#include <jansson.h>

#include "vlm_model_config.h"


typedef struct {
    json_t       *primary;
    json_t       *fallback;
    const char   *section;
    vlm_error_t  *err;
    vlm_status_t  rc;
} vlm_cfg_ctx_t;


/* NULL when absent or null in both */
json_t *vlm_cfg_get(vlm_cfg_ctx_t *c, const char *key);
int vlm_cfg_int(vlm_cfg_ctx_t *c, const char *key, int def, int min,
    int max);
/* a positive number */
double vlm_cfg_num(vlm_cfg_ctx_t *c, const char *key, double def);
vlm_act_t vlm_cfg_act(vlm_cfg_ctx_t *c, const char *key, const char *def);
/* eos_token_id: an integer or a list of them */
void vlm_cfg_eos(vlm_model_config_t *cfg, json_t *v);

/* SmolVLM and Idefics3 (model/idefics3/vlm_idefics3_config.c) */
void vlm_cfg_idefics3(vlm_model_config_t *cfg, json_t *root,
    vlm_cfg_ctx_t *c);


#endif /* VLM_MODEL_CONFIG_JSON_H */
