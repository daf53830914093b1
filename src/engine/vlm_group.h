/*
 * A tensor-parallel engine group as the scheduler sees it: the model calls
 * that change state (sequences, prefill, steps) made on rank 0 and
 * replayed, in the same order with the same arguments, by ranks 1..N-1,
 * so that the collectives inside each call meet.  Rank 0 broadcasts each
 * call as a small plan over the group's communicator before making it;
 * the others wait for the next plan in vlm_group_follow().  The plan
 * carries token ids and the images' grids; the pixels stay where they
 * are, in the request queue's arena, which every rank maps, and travel as
 * arena offsets.  A group of one rank makes the calls directly.
 *
 * Every buffer is allocated by vlm_group_init(); a call allocates nothing.
 */

#ifndef VLM_GROUP_H
#define VLM_GROUP_H

#include "core/vlm.h"
#include "backend/vlm_comm.h"


#define VLM_GROUP_MAX_IMAGES  64


typedef struct vlm_group_s  vlm_group_t;


/*
 * comm NULL: one rank.  arena, arena_size: the memory the images' pixels
 * live in on this rank (the request queue's arena).
 */
vlm_status_t vlm_group_init(vlm_group_t **group, vlm_model_t *model,
    vlm_comm_t *comm, const void *arena, size_t arena_size,
    vlm_error_t *err);
void vlm_group_free(vlm_group_t *group);

/* rank 0: the model calls of vlm.h, made by every rank */
vlm_status_t vlm_group_seq_init(vlm_group_t *group, vlm_seq_t **seq,
    vlm_error_t *err);
void vlm_group_seq_free(vlm_group_t *group, vlm_seq_t *seq);
/* vlm_seq_fork() on every rank: a choice of n continues from the prompt */
vlm_status_t vlm_group_seq_fork(vlm_group_t *group, vlm_seq_t *src,
    vlm_seq_t **seq, vlm_error_t *err);
vlm_status_t vlm_group_prefill_start(vlm_group_t *group, vlm_seq_t *seq,
    const int32_t *ids, int n_ids, const vlm_image_t *images, int n_images,
    vlm_error_t *err);
vlm_status_t vlm_group_prefix_map(vlm_group_t *group, vlm_seq_t *seq,
    const int32_t *ids, int n_ids, const vlm_image_t *images, int n_images,
    int *n_ids_cached, int *n_images_cached, vlm_error_t *err);
/* rows: vlm_prefill_rows() for this work on every rank (0: default) */
vlm_status_t vlm_group_prefill_work(vlm_group_t *group, int rows, int *done,
    vlm_error_t *err);
void vlm_group_prefill_cancel(vlm_group_t *group);
vlm_status_t vlm_group_step(vlm_group_t *group,
    const vlm_step_item_t *items, int n_items, vlm_error_t *err);
/*
 * vlm_prefill_last() and vlm_prefill_sample(): rank 0 draws on its
 * device, the next vlm_group_prefill_work()'s plan tells the other ranks
 * which of the rows it draws (their shares of those rows' logits
 * computed and gathered, none brought to their hosts); rows: those that
 * work is given
 */
int vlm_group_prefill_last(vlm_group_t *group, int rows, int *len);
vlm_status_t vlm_group_prefill_sample(vlm_group_t *group,
    struct vlm_sample_row_s *const *rows, int n_more,
    struct vlm_sample_res_s *res, int vocab, vlm_error_t *err);
/*
 * vlm_step_sample_more(), the draws more and which rows rank 0 draws on
 * its device in the step's plan; rows NULL: vlm_group_step()
 */
vlm_status_t vlm_group_step_sample(vlm_group_t *group,
    const vlm_step_item_t *items, int n_items, const int *more, int n_more,
    struct vlm_sample_row_s *const *rows, struct vlm_sample_res_s *res,
    int vocab, vlm_error_t *err);
/* tells the other ranks to return from vlm_group_follow() */
void vlm_group_stop(vlm_group_t *group);

/*
 * ranks 1..N-1: replays rank 0's calls until it stops the group (VLM_OK)
 * or the group fails (its communicator was aborted: a rank died)
 */
vlm_status_t vlm_group_follow(vlm_group_t *group, vlm_error_t *err);
/* a follower's call after each step it replays (its gauges); NULL: none */
void vlm_group_on_step(vlm_group_t *group, void (*fn)(void *data),
    void *data);


#endif /* VLM_GROUP_H */
