/*
 * The engine's scheduler: serves the shared request queue with a loaded
 * model.  Each step admits waiting requests and runs one batched forward
 * pass holding a token for every running request and, in the rows left
 * (max_batch_tokens), the next chunk of a text prompt, so running streams
 * keep their pace while long prompts come in.  A prompt with images is
 * prefilled a piece a step ahead of that pass (one vision block, or one
 * chunk of its prompt), one such prompt at a time.  It samples,
 * detokenizes, applies stop strings and writes tokens and text to each
 * request's output ring.  A
 * request whose reader is slow holds its place (the ring is full) without
 * holding the others; a cancelled one is dropped within one step.  A
 * request of n choices is taken when n sequence slots are free: its
 * prompt is prefilled on one, which the other n - 1 fork when it is in;
 * each choice has its sampler, grammar matcher and stop state, and the
 * request finishes with its last choice.
 *
 * Every buffer is allocated by vlm_sched_init for the model's sequence
 * slots; a step allocates nothing.
 */

#ifndef VLM_SCHED_H
#define VLM_SCHED_H

#include "core/vlm.h"
#include "queue/vlm_queue.h"
#include "text/vlm_tokenizer.h"
#include "vlm_group.h"


typedef struct vlm_sched_s  vlm_sched_t;


/* the model's state-changing calls go through group (vlm_group.h) */
vlm_status_t vlm_sched_init(vlm_sched_t **sched, vlm_model_t *model,
    vlm_group_t *group, const vlm_tokenizer_t *tok, vlm_queue_t *q,
    vlm_error_t *err);
void vlm_sched_free(vlm_sched_t *sched);

/*
 * One iteration; admit 0 takes no new requests (a retired queue).
 * Returns the number of requests in flight (0: the engine may sleep).
 */
int vlm_sched_step(vlm_sched_t *sched, int admit);

/*
 * Whether the last step did anything (prefilled, decoded, wrote output,
 * ended a request): when it did not, every request in flight waits for a
 * slow reader and the engine should not spin.
 */
int vlm_sched_progressed(vlm_sched_t *sched);

/*
 * Whether a request ended because the device failed (VLM_ERR_DEVICE: a
 * GPU's sticky fault): what it held is lost and the engine must stop.
 */
int vlm_sched_device_lost(vlm_sched_t *sched);

/* publishes the engine's pools (KV blocks, sequences) to /metrics */
void vlm_sched_publish(vlm_sched_t *sched);
/* a rank's GPU memory by kind to /metrics, from its model's stats */
void vlm_sched_publish_gpu(vlm_metrics_t *metrics, int rank,
    const vlm_model_stats_t *st);

/* ends every request in flight with an error (engine shutdown) */
void vlm_sched_abort(vlm_sched_t *sched, const char *msg);


#endif /* VLM_SCHED_H */
