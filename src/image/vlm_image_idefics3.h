/*
 * The Idefics3 / SmolVLM image processor (transformers 4.57
 * SmolVLMImageProcessor / Idefics3ImageProcessor, the PIL one): resize so
 * that the longest edge is size.longest_edge (the other even), resize up
 * to whole tiles of max_image_size.longest_edge, split into rows x cols
 * tiles plus the whole image resized to one tile (the global image, last),
 * each resize Pillow's with the configured filter (LANCZOS by default);
 * then rescale and normalise as numpy does.  The output is every frame's
 * patches as rows [frames * side * side, 3 * P * P] (patches row-major,
 * columns (C, P, P); a tile's last tile % P pixels, which the tower's
 * convolution drops, are left out), the layout of the engine's
 * vlm_image_t; and the
 * image's prompt text: per tile <fake_token_around_image><row_r_col_c>
 * and the tile's <image> tokens, "\n" after each row, then "\n" and
 * <fake_token_around_image><global-img>, its <image> tokens and
 * <fake_token_around_image> (an unsplit image: the last part only).
 */

#ifndef VLM_IMAGE_IDEFICS3_H
#define VLM_IMAGE_IDEFICS3_H

#include <jansson.h>

#include "core/vlm_common.h"
#include "vlm_image_resize.h"


#define VLM_IDEFICS3_MAX_TILES  8       /* rows and columns, each */


typedef struct {
    uint32_t        longest_edge;       /* size; 0: no first resize */
    uint32_t        tile;               /* max_image_size.longest_edge */
    uint32_t        patch_size;         /* the tower's */
    vlm_resample_t  resample;
    unsigned        do_resize;
    unsigned        do_image_splitting;
    unsigned        do_rescale;
    unsigned        do_normalize;
    double          rescale_factor;
    double          image_mean[3];
    double          image_std[3];
} vlm_idefics3_image_config_t;


typedef struct {
    uint32_t  resized_w, resized_h;     /* after the longest-edge resize */
    uint32_t  split_w, split_h;         /* after the resize to tiles */
    uint32_t  rows, cols;               /* 0, 0: not split */
    uint32_t  n_frames;                 /* rows * cols (+ 1, global) */
    uint32_t  side;                     /* patches along a frame */
    uint32_t  patch_dim;                /* 3 * P * P */
    size_t    n_values;                 /* floats of the patch rows */
    size_t    scratch;                  /* bytes vlm_idefics3_image_run */
} vlm_idefics3_image_plan_t;


/* the processor's special tokens */
#define VLM_IDEFICS3_FAKE    "<fake_token_around_image>"
#define VLM_IDEFICS3_IMAGE   "<image>"
#define VLM_IDEFICS3_GLOBAL  "<global-img>"


/* SmolVLMImageProcessor's defaults for the patch size given */
void vlm_idefics3_image_config_default(vlm_idefics3_image_config_t *cfg,
    uint32_t patch_size);
/* preprocessor_config.json over the defaults */
vlm_status_t vlm_idefics3_image_config_parse(
    vlm_idefics3_image_config_t *cfg, const char *json, size_t len,
    vlm_error_t *err);

/* the sizes, tiles and buffers of a width x height image */
vlm_status_t vlm_idefics3_image_plan(const vlm_idefics3_image_config_t *cfg,
    uint32_t width, uint32_t height, vlm_idefics3_image_plan_t *plan,
    vlm_error_t *err);

/*
 * rgb: height rows of width * 3 bytes; pixel rows into out (cap floats,
 * at least plan->n_values), using scratch of plan->scratch bytes.
 */
vlm_status_t vlm_idefics3_image_run(const vlm_idefics3_image_config_t *cfg,
    const vlm_idefics3_image_plan_t *plan, const uint8_t *rgb,
    uint32_t width, uint32_t height, void *scratch, size_t scratch_len,
    float *out, size_t cap, vlm_error_t *err);

/*
 * A frame's pixels (side * P square, rows of stride bytes) as its patch
 * rows through lut (rescale and normalise of each channel's byte)
 * (InternVL's processor writes its frames with it too)
 */
void vlm_idefics3_patchify(const uint8_t *px, size_t stride, uint32_t side,
    uint32_t P, const float *lut, float *out);

/*
 * The image's prompt text (get_image_prompt_string) for tiles of seq_len
 * <image> tokens each, for the tokenizer: its length, written to buf
 * (NUL-terminated) when it fits in cap bytes.
 */
size_t vlm_idefics3_image_prompt(const vlm_idefics3_image_plan_t *plan,
    uint32_t seq_len, char *buf, size_t cap);

/*
 * The processor's text side: every <image> of a rendered chat prompt
 * replaced by its image's prompt text, in order.  Returns the length of
 * the result, written to buf (NUL-terminated) when it fits in cap bytes;
 * *n_found is the number of <image> tags (the caller checks it against
 * n_images; tags past n_images are dropped).
 */
size_t vlm_idefics3_expand_prompt(const char *text, size_t len,
    const vlm_idefics3_image_plan_t *plans, size_t n_images,
    uint32_t seq_len, char *buf, size_t cap, size_t *n_found);


/*
 * What the Gemma 3 processor (vlm_image_gemma3.c) shares: the text of
 * every tag of a prompt replaced by part()'s text of the image (tags past
 * n_images dropped), as vlm_idefics3_expand_prompt() does for <image>;
 * and the readers of a boolean and of a list of three numbers of
 * preprocessor_config.json (0: absent or good, -1: bad).
 */
typedef size_t (*vlm_image_part_pt)(const void *data, size_t i, char *buf,
    size_t cap);

/* appends s to buf while it fits (NUL-terminated), counting every byte */
void vlm_image_text_put(char *buf, size_t cap, size_t *n, const char *s);
size_t vlm_image_expand_tags(const char *text, size_t len, const char *tag,
    size_t n_images, vlm_image_part_pt part, const void *data, char *buf,
    size_t cap, size_t *n_found);

struct json_t;

/*
 * preprocessor_config.json's flags and channel triples (the Gemma 3 and
 * InternVL parsers read them so too): 0 when absent or read, -1 when not
 * a boolean, not three numbers (positive ones when asked)
 */
int vlm_image_json_flag(struct json_t *root, const char *key,
    unsigned *out);
int vlm_image_json_triple(struct json_t *root, const char *key, double *out,
    int positive);
int vlm_image_json_common(struct json_t *root,
    vlm_idefics3_image_config_t *cfg, unsigned resamples, const char **key);
/* preprocessor_config.json as an object, or NULL and err (a 400's words) */
struct json_t *vlm_image_json_load(const char *json, size_t len,
    vlm_error_t *err);
/* the error of a key whose value the family's processor does not take */
vlm_status_t vlm_image_json_refused(const char *key, vlm_error_t *err);


#endif /* VLM_IMAGE_IDEFICS3_H */
