/*
 * The CUDA backend's sample() op (vlm_backend.h): a step's rows drawn on
 * the device by kernels/sample.cu, their parameters packed on the host.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_cuda_int.h"


/*
 * A step's sampling (kernels/sample.cu): the rows' parameters, biases
 * and masks packed and uploaded through the ring (in pieces of rows
 * when the masks outgrow the blob), a launch a piece, then one
 * asynchronous copy of every row's result to pinned memory and the
 * step's one wait.
 */
vlm_status_t
vlm_cuda_sample_op(vlm_backend_t *be, const vlm_sample_row_t *rows, int n,
    int vocab, vlm_sample_res_t *res, vlm_error_t *err)
{
    int                     i, j, r0, words, need, used;
    const char             *why;
    vlm_cuda_t             *cu = (vlm_cuda_t *) be;
    vlm_cuda_sample_row_t  *d;
    vlm_cuda_sample_out_t  *o;
    const vlm_sample_row_t *r;

    words = (vocab + 31) / 32;

    if (n < 0 || n > VLM_CUDA_SAMPLE_ROWS || vocab <= 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "cuda backend: sample "
                             "of %d rows of %d (at most %d rows)", n, vocab,
                             VLM_CUDA_SAMPLE_ROWS);
    }

    for (i = 0; i < n; i++) {
        r = &rows[i];

        if (r->logits == NULL || r->n_bias < 0 || r->n_hold < 0
            || r->n_hold > VLM_BACKEND_SAMPLE_HOLD || r->top_logprobs < 0
            || r->top_logprobs > VLM_BACKEND_SAMPLE_TOP
            || 2 * r->n_bias + (r->mask != NULL ? words : 0)
               > (int) VLM_CUDA_SAMPLE_BLOB)
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "cuda backend: "
                                 "sample row %d out of range", i);
        }

        for (j = 0; j < r->n_bias; j++) {
            if (r->bias_ids[j] < 0 || r->bias_ids[j] >= vocab) {
                return vlm_error_set(err, VLM_ERR_INVALID, "cuda backend: "
                                     "logit_bias token %d is outside the "
                                     "vocabulary", (int) r->bias_ids[j]);
            }
        }

        for (j = 0; j < r->n_hold; j++) {
            if (r->hold[j] < 0 || r->hold[j] >= vocab) {
                return vlm_error_set(err, VLM_ERR_INVALID, "cuda backend: "
                                     "stop token %d is outside the "
                                     "vocabulary", (int) r->hold[j]);
            }
        }
    }

    for (r0 = 0; r0 < n && cu->error == cudaSuccess; r0 = i) {
        used = 0;

        for (i = r0; i < n; i++) {
            r = &rows[i];
            need = 2 * r->n_bias + (r->mask != NULL ? words : 0);

            if (used + need > (int) VLM_CUDA_SAMPLE_BLOB) {
                break;
            }

            d = &cu->sample_hrows[i];
            memset(d, 0, sizeof(vlm_cuda_sample_row_t));
            d->x = r->logits;
            d->counts = r->counts;
            d->uniform = r->uniform;
            d->temperature = r->temperature;
            d->top_p = r->top_p;
            d->min_p = r->min_p;
            d->repetition_penalty = r->repetition_penalty;
            d->presence_penalty = r->presence_penalty;
            d->frequency_penalty = r->frequency_penalty;
            d->top_k = r->top_k;
            d->n_top = vlm_min(r->top_logprobs, vocab);
            d->n_hold = r->n_hold;
            d->n_bias = r->n_bias;
            d->bias_off = used;

            /* (hold and the biases may be NULL when there are none) */
            if (r->n_hold > 0) {
                memcpy(d->hold, r->hold,
                       (size_t) r->n_hold * sizeof(int32_t));
            }

            if (r->n_bias > 0) {
                memcpy(cu->sample_hblob + used, r->bias_ids,
                       (size_t) r->n_bias * sizeof(int32_t));
                memcpy(cu->sample_hblob + used + r->n_bias, r->bias,
                       (size_t) r->n_bias * sizeof(float));
                used += 2 * r->n_bias;
            }

            d->mask_off = -1;

            if (r->mask != NULL) {
                d->mask_off = used;
                memcpy(cu->sample_hblob + used, r->mask,
                       (size_t) words * sizeof(uint32_t));
                used += words;
            }
        }

        if (vlm_cuda_stage(cu, cu->sample_rows + r0, cu->sample_hrows + r0,
                           (size_t) (i - r0) * sizeof(vlm_cuda_sample_row_t),
                           NULL, 1, 1)
            != VLM_OK
            || vlm_cuda_stage(cu, cu->sample_blob, cu->sample_hblob,
                              (size_t) used * sizeof(uint32_t), NULL, 1, 1)
               != VLM_OK)
        {
            break;
        }

        vlm_cuda_check(cu, vlm_cuda_sample(cu->stream, cu->sample_out + r0,
                                           cu->sample_rows + r0,
                                           cu->sample_blob, i - r0, vocab),
                       "sample");
    }

    if (n > 0) {
        vlm_cuda_check(cu, cudaMemcpyAsync(cu->sample_pinned, cu->sample_out,
                                           (size_t) n
                                           * sizeof(vlm_cuda_sample_out_t),
                                           cudaMemcpyDeviceToHost,
                                           cu->stream),
                       "sample");
    }

    vlm_cuda_check(cu, cudaStreamSynchronize(cu->stream), "sample");

    if (cu->error != cudaSuccess) {
        why = vlm_cuda_failure(be);
        return vlm_error_set(err, VLM_ERR_DEVICE, "model: the cuda backend "
                             "failed in this step: %s", why);
    }

    for (i = 0; i < n; i++) {
        o = &cu->sample_pinned[i];

        if (o->token == -2) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "sampler: logit %d is NaN", (int) o->nan);
        }

        if (o->token < 0 || o->token >= vocab
            || o->n_top < 0 || o->n_top > VLM_BACKEND_SAMPLE_TOP)
        {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "sampler: no token is allowed");
        }

        res[i].token = o->token;
        res[i].logprob = o->logprob;
        res[i].n_top = o->n_top;
        memcpy(res[i].top_id, o->top_id, (size_t) o->n_top * sizeof(int32_t));
        memcpy(res[i].top_logprob, o->top_logprob,
               (size_t) o->n_top * sizeof(float));
    }

    return VLM_OK;
}
