/*
 * The config.json readers that the parsers of every family share
 * (vlm_model_config_json.c): a key looked up in a primary object, then
 * in a fallback, checked and range-limited, the first error kept in the
 * context with the section it was in; and the entry of a family in the
 * parser's table (vlm_model_config.c).
 */

#ifndef VLM_MODEL_CONFIG_JSON_H
#define VLM_MODEL_CONFIG_JSON_H

#include <jansson.h>

#include "vlm_model_config.h"


#define VLM_CFG_MAX_DIM  (1 << 22)


typedef struct vlm_cfg_ctx_s {
    json_t       *primary;
    json_t       *fallback;
    const char   *section;
    vlm_error_t  *err;
    vlm_status_t  rc;
} vlm_cfg_ctx_t;


/*
 * the keys that follow are of section, looked up in primary, then in
 * fallback (either NULL or not an object: none)
 */
void vlm_cfg_section(vlm_cfg_ctx_t *c, const char *section, json_t *primary,
    json_t *fallback);
/* "config: <section>: <what> is not supported", unless an error is kept */
void vlm_cfg_refuse(vlm_cfg_ctx_t *c, const char *what);
/* NULL when absent or null in both */
json_t *vlm_cfg_get(vlm_cfg_ctx_t *c, const char *key);
int vlm_cfg_int(vlm_cfg_ctx_t *c, const char *key, int def, int min,
    int max);
/* a positive number */
double vlm_cfg_num(vlm_cfg_ctx_t *c, const char *key, double def);
vlm_act_t vlm_cfg_act(vlm_cfg_ctx_t *c, const char *key, const char *def);
/* eos_token_id: an integer or a list of them */
void vlm_cfg_eos(vlm_model_config_t *cfg, json_t *v);


/* a plain decoder's defaults (its transformers config class's) */
typedef struct {
    int     vocab_size;
    int     hidden_size;
    int     intermediate_size;
    int     n_layers;
    int     n_heads;            /* num_key_value_heads defaults to it */
    int     max_position_embeddings;
    double  rms_norm_eps;
    double  rope_theta;
} vlm_cfg_text_defaults_t;


/*
 * The text_config of a plain decoder (Llama, Qwen2): sizes, norm eps,
 * rotary base, activation; heads that divide evenly; a head_dim other
 * than hidden_size / heads and rope_scaling refused; plain 1D rotary
 * (one mrope_section component).  The family checks its own keys after.
 */
void vlm_cfg_text_plain(vlm_cfg_ctx_t *c, vlm_text_config_t *t,
    const vlm_cfg_text_defaults_t *d);


/*
 * A family of checkpoints as config.json names it, and the parser of its
 * keys: vlm_model_config_parse() finds the entry by the class in
 * "architectures" (or by model_type) in its table and calls the parser
 * through it, with cfg->arch set and c's error fields ready; the parser
 * sets the sections it reads and leaves the first error in c->rc.
 *
 * A registry, not a call by name: the family folders call the readers
 * above (vlm_model_config_json.c), and the dispatcher calls them back
 * only through these entries, so no file of model/ names a function of
 * a family's and no two files call each other.
 */
typedef struct {
    const char  *name;          /* the class in "architectures" */
    const char  *model_type;
    vlm_arch_t   arch;
    void       (*parse)(vlm_model_config_t *cfg, json_t *root,
                        vlm_cfg_ctx_t *c);
} vlm_cfg_family_t;


/* SmolVLM and Idefics3 (model/idefics3/vlm_idefics3_config.c) */
extern const vlm_cfg_family_t  vlm_cfg_family_smolvlm;
extern const vlm_cfg_family_t  vlm_cfg_family_idefics3;
/* InternVL (model/internvl/vlm_internvl_config.c) */
extern const vlm_cfg_family_t  vlm_cfg_family_internvl;
/* Gemma 3 (model/gemma3/vlm_gemma3_config.c) */
extern const vlm_cfg_family_t  vlm_cfg_family_gemma3;


#endif /* VLM_MODEL_CONFIG_JSON_H */
