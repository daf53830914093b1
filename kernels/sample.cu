/*
 * A step's sampling on the device, a block a row, with the CPU sampler's
 * semantics (src/engine/vlm_sampler.c): the penalties, logit_bias, the
 * grammar mask and the stop ids held back (min_tokens) on the logits in
 * place, the log-sum-exp for the log probabilities, then greedy, or
 * top_k, top_p, min_p and one draw at the temperature with the host's
 * uniform number, and the top log probabilities.
 *
 * The CPU sampler sorts its candidates; 151,936 of them a row would be
 * the step's costliest work here.  Every cut it makes is a prefix of the
 * candidates in the order (logit descending, id ascending), found here
 * by a radix select on a 64-bit key of that order (the logit's bits
 * flipped to sort descending, then the id): a pass a byte of the key
 * over the elements whose key starts with the bytes chosen so far,
 * histograms of their count and of their probability mass in shared
 * memory, and the bin where the running count or mass crosses the
 * target chosen; the select ends when that bin holds one element, after
 * 3 or 4 passes on real logits (8 at most).  Radix rather than a
 * bisection on thresholds: a fixed number of passes, and ties of equal
 * logits resolved by id as the CPU resolves them.  top_k is a select on
 * the count, top_p and the draw on the mass, min_p a threshold on the
 * probability, the top logprobs a select on the count and a gather of
 * at most 20 elements.  A top_k of at most VLM_SAMPLE_FEW (Qwen's
 * generation_config has 20) is cheaper still: its candidates, found by
 * the select, are gathered and sorted in shared memory (bitonic), and
 * one thread walks them as the CPU sampler does, in its order and in
 * double: top_p, min_p and the draw without another pass over the row.
 */

#include "vlm_cuda_util.cuh"


#define VLM_SAMPLE_THREADS  512
#define VLM_SAMPLE_BINS     256
#define VLM_SAMPLE_ALL      ((uint64_t) 0xffffffffffffffffull)
#define VLM_SAMPLE_FEW      1024    /* top_k candidates sorted in shared */


/* the order of the candidates: logit descending, then id ascending */
static __device__ __forceinline__ uint64_t
vlm_sample_key(float v, int i)
{
    uint32_t  u;

    if (v == 0.0f) {
        v = 0.0f;               /* -0 and +0 compare equal, as on the CPU */
    }

    memcpy(&u, &v, sizeof(u));
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);

    return ((uint64_t) ~u << 32) | (uint32_t) i;
}


/*
 * the elements a select or a sum sees: the candidates (all, or the
 * unmasked ones) with a key up to limit, min_p's cut when minp; each
 * weighs 1 (count) or its probability at the temperature before the
 * normalization
 */
typedef struct {
    const float     *x;
    int              vocab;
    int              masked;    /* -inf logits are not candidates */
    uint64_t         limit;
    int              count;
    float            m;         /* the largest logit */
    float            t;         /* the temperature */
    int              minp;
    double           min_p;
    double           sum;       /* min_p's normalization */
    uint64_t         best;      /* the first candidate's key */
} vlm_sample_set_t;


/* element i's weight in s, or a negative number if s leaves it out */
static __device__ __forceinline__ double
vlm_sample_weight(const vlm_sample_set_t *s, int i, float v, uint64_t key)
{
    double  w;

    if ((s->masked && v == -INFINITY) || key > s->limit) {
        return -1.0;
    }

    if (s->count && !s->minp) {
        return 1.0;
    }

    w = (double) expf((v - s->m) / s->t);

    if (s->minp && key != s->best && w / s->sum < s->min_p * (1.0 / s->sum)) {
        return -1.0;
    }

    return s->count ? 1.0 : w;
}


template <typename T>
struct vlm_sample_max_op {
    static __device__ __forceinline__ T
    f(T a, T b)
    {
        return a > b ? a : b;
    }
};


template <typename T>
struct vlm_sample_min_op {
    static __device__ __forceinline__ T
    f(T a, T b)
    {
        return a < b ? a : b;
    }
};


template <typename T>
struct vlm_sample_sum_op {
    static __device__ __forceinline__ T
    f(T a, T b)
    {
        return a + b;
    }
};


/*
 * op over the block, every thread gets it; none is op's identity, red
 * holds 32 of 8 bytes
 */
template <typename Op, typename T>
static __device__ __forceinline__ T
vlm_sample_reduce(T v, T none, uint64_t *red)
{
    int  o, lane, warp, nw;
    T   *r = (T *) red;

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    nw = blockDim.x / VLM_WARP;

    for (o = VLM_WARP / 2; o > 0; o >>= 1) {
        v = Op::f(v, __shfl_xor_sync(0xffffffffu, v, o));
    }

    __syncthreads();            /* red may still be read from a last call */

    if (lane == 0) {
        r[warp] = v;
    }

    __syncthreads();

    v = lane < nw ? r[lane] : none;

    for (o = VLM_WARP / 2; o > 0; o >>= 1) {
        v = Op::f(v, __shfl_xor_sync(0xffffffffu, v, o));
    }

    return v;
}


/* the sum of the weights of s's elements */
static __device__ double
vlm_sample_sum(const vlm_sample_set_t *s, uint64_t *red)
{
    int     i;
    float   v;
    double  w, sum;

    sum = 0.0;

    for (i = threadIdx.x; i < s->vocab; i += blockDim.x) {
        v = s->x[i];
        w = vlm_sample_weight(s, i, v, vlm_sample_key(v, i));
        sum += w > 0.0 ? w : 0.0;
    }

    return vlm_sample_reduce<vlm_sample_sum_op<double> >(sum, 0.0, red);
}


typedef struct {
    int       cnt[VLM_SAMPLE_BINS];
    double    mass[VLM_SAMPLE_BINS];
    int       bin;
    int       bin_cnt;
    double    base;
    uint64_t  key;
} vlm_sample_hist_t;


/*
 * The key of the first of s's elements, in key order, where the running
 * weight passes target (strict: > target, else >=); the last element if
 * none does, VLM_SAMPLE_ALL if s is empty.  Each thread adds its run of
 * elements of one bin before an atomic add: on the first byte nearly all
 * the logits share a bin, which one atomic a logit would serialize.
 */
static __device__ uint64_t
vlm_sample_select(const vlm_sample_set_t *s, double target, int strict,
    vlm_sample_hist_t *h)
{
    int       i, b, shift, run_b, run_c, last;
    float     v;
    double    w, acc, last_acc, run_m;
    uint64_t  key, prefix, high;

    prefix = 0;
    high = 0;

    if (threadIdx.x == 0) {
        h->base = 0.0;
        h->key = VLM_SAMPLE_ALL;
    }

    for (shift = 56; shift >= 0; shift -= 8) {

        for (i = threadIdx.x; i < VLM_SAMPLE_BINS; i += blockDim.x) {
            h->cnt[i] = 0;
            h->mass[i] = 0.0;
        }

        __syncthreads();

        run_b = -1;
        run_c = 0;
        run_m = 0.0;

        for (i = threadIdx.x; i < s->vocab; i += blockDim.x) {
            v = s->x[i];
            key = vlm_sample_key(v, i);

            if ((key & high) != prefix) {
                continue;
            }

            w = vlm_sample_weight(s, i, v, key);
            if (w < 0.0) {
                continue;
            }

            b = (int) ((key >> shift) & 0xff);

            if (b != run_b) {
                if (run_c > 0) {
                    atomicAdd(&h->cnt[run_b], run_c);
                    atomicAdd(&h->mass[run_b], run_m);
                }

                run_b = b;
                run_c = 0;
                run_m = 0.0;
            }

            run_c++;
            run_m += w;
        }

        if (run_c > 0) {
            atomicAdd(&h->cnt[run_b], run_c);
            atomicAdd(&h->mass[run_b], run_m);
        }

        __syncthreads();

        if (threadIdx.x == 0) {
            acc = h->base;
            last = -1;
            last_acc = acc;
            h->bin = -1;

            for (b = 0; b < VLM_SAMPLE_BINS; b++) {
                if (h->cnt[b] == 0) {
                    continue;
                }

                last = b;
                last_acc = acc;

                if (strict ? acc + h->mass[b] > target
                           : acc + h->mass[b] >= target)
                {
                    h->bin = b;
                    break;
                }

                acc += h->mass[b];
            }

            if (h->bin < 0) {
                h->bin = last;
                acc = last_acc;
            }

            h->base = acc;
            h->bin_cnt = last >= 0 ? h->cnt[h->bin] : 0;
        }

        __syncthreads();

        if (h->bin < 0) {
            return VLM_SAMPLE_ALL;
        }

        prefix |= (uint64_t) h->bin << shift;
        high |= (uint64_t) 0xff << shift;

        if (h->bin_cnt == 1) {
            break;
        }

        __syncthreads();        /* the bins are read before they are reset */
    }

    /* the one element under the prefix */

    for (i = threadIdx.x; i < s->vocab; i += blockDim.x) {
        v = s->x[i];
        key = vlm_sample_key(v, i);

        if ((key & high) == prefix && vlm_sample_weight(s, i, v, key) >= 0.0)
        {
            h->key = key;
        }
    }

    __syncthreads();

    key = h->key;

    __syncthreads();

    return key;
}


/*
 * top_k <= VLM_SAMPLE_FEW: the k candidates with a key up to limit
 * gathered into cand and sorted (bitonic, padded to a power of 2), then
 * top_p, min_p and the draw by one thread in the CPU sampler's order and
 * arithmetic; the drawn key, every thread gets it
 */
static __device__ uint64_t
vlm_sample_few(const vlm_cuda_sample_row_t *p, const vlm_sample_set_t *s,
    int k, uint64_t *cand, int *n_cand, uint64_t *drawn)
{
    int       i, j, n, w, m2;
    float     v, m;
    double    sum, pmax, cum, r, e;
    uint64_t  key, t;

    if (threadIdx.x == 0) {
        *n_cand = 0;
    }

    __syncthreads();

    for (i = threadIdx.x; i < s->vocab; i += blockDim.x) {
        v = s->x[i];
        key = vlm_sample_key(v, i);

        if (key <= s->limit && !(s->masked && v == -INFINITY)) {
            j = atomicAdd(n_cand, 1);
            if (j < VLM_SAMPLE_FEW) {
                cand[j] = key;
            }
        }
    }

    __syncthreads();

    n = *n_cand < k ? *n_cand : k;

    for (m2 = 1; m2 < n; m2 <<= 1) {
        /* void */
    }

    for (i = n + threadIdx.x; i < m2; i += blockDim.x) {
        cand[i] = VLM_SAMPLE_ALL;
    }

    __syncthreads();

    for (w = 2; w <= m2; w <<= 1) {
        for (j = w >> 1; j > 0; j >>= 1) {
            for (i = threadIdx.x; i < m2; i += blockDim.x) {
                if ((i ^ j) > i
                    && ((i & w) == 0 ? cand[i] > cand[i ^ j]
                                     : cand[i] < cand[i ^ j]))
                {
                    t = cand[i];
                    cand[i] = cand[i ^ j];
                    cand[i ^ j] = t;
                }
            }

            __syncthreads();
        }
    }

    if (threadIdx.x == 0) {
        /* vlm_sampler_sample()'s walk, its float m and double sums */
        m = s->x[(uint32_t) cand[0]];

        sum = 0.0;
        for (i = 0; i < n; i++) {
            sum += exp(((double) s->x[(uint32_t) cand[i]] - m)
                       / p->temperature);
        }

        pmax = 1.0 / sum;
        cum = 0.0;
        k = n;

        for (i = 0; i < n; i++) {
            r = exp(((double) s->x[(uint32_t) cand[i]] - m)
                    / p->temperature) / sum;

            if (i > 0 && r < p->min_p * pmax) {
                k = i;
                break;
            }

            cum += r;

            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }

        sum = 0.0;
        for (i = 0; i < k; i++) {
            sum += exp(((double) s->x[(uint32_t) cand[i]] - m)
                       / p->temperature);
        }

        r = p->uniform * sum;
        cum = 0.0;
        *drawn = cand[k - 1];

        for (i = 0; i < k; i++) {
            e = exp(((double) s->x[(uint32_t) cand[i]] - m) / p->temperature);
            cum += e;
            if (r < cum) {
                *drawn = cand[i];
                break;
            }
        }
    }

    __syncthreads();

    key = *drawn;

    __syncthreads();

    return key;
}


/*
 * out[r] for rows[r] of the launch: a block a row, VLM_SAMPLE_THREADS
 * threads striding over the vocabulary
 */
static __global__ void
vlm_sample_kernel(vlm_cuda_sample_out_t *outs,
    const vlm_cuda_sample_row_t *rows, const uint32_t *blob, int vocab)
{
    __shared__ uint64_t           red[VLM_WARP];
    __shared__ vlm_sample_hist_t  h;
    __shared__ int                nan_at, n_top;
    __shared__ float              held[VLM_CUDA_SAMPLE_HOLD];
    __shared__ uint64_t           top_key[VLM_CUDA_SAMPLE_TOP];
    __shared__ uint64_t           cand[VLM_SAMPLE_FEW], drawn;
    __shared__ int                n_few;
    int                           i, j, c, n_cand, finite, tok;
    float                         v, m, *x;
    double                        lse, sum, target;
    uint64_t                      key, best, limit;
    const uint32_t               *mask;
    const int32_t                *bias_id;
    const float                  *bias;
    vlm_sample_set_t              s;
    vlm_cuda_sample_out_t        *out;
    const vlm_cuda_sample_row_t  *p;

    p = &rows[blockIdx.x];
    out = &outs[blockIdx.x];
    x = p->x;
    mask = p->mask_off >= 0 ? blob + p->mask_off : NULL;

    if (threadIdx.x == 0) {
        nan_at = vocab;
        n_top = 0;
    }

    __syncthreads();

    /* the penalties and the mask, in place */

    for (i = threadIdx.x; i < vocab; i += blockDim.x) {
        v = x[i];

        if (v != v) {
            atomicMin(&nan_at, i);
            continue;
        }

        if (p->counts != NULL) {
            c = p->counts[i];

            if (c != 0 && p->repetition_penalty != 1.0f) {
                v = v > 0.0f ? v / p->repetition_penalty
                             : v * p->repetition_penalty;
            }

            if (c >> 1 > 0) {
                v -= p->presence_penalty
                     + p->frequency_penalty * (float) (c >> 1);
            }
        }

        if (mask != NULL && !((mask[i >> 5] >> (i & 31)) & 1)) {
            v = -INFINITY;
        }

        x[i] = v;
    }

    __syncthreads();

    if (nan_at < vocab) {
        if (threadIdx.x == 0) {
            out->token = -2;
            out->nan = nan_at;
            out->n_top = 0;
        }

        return;
    }

    /* logit_bias (distinct ids; a masked logit stays -inf) */

    bias_id = (const int32_t *) blob + p->bias_off;
    bias = (const float *) (blob + p->bias_off + p->n_bias);

    for (j = threadIdx.x; j < p->n_bias; j += blockDim.x) {
        x[bias_id[j]] += bias[j];
    }

    __syncthreads();

    /* min_tokens: the stop ids held back, unless nothing else is left */

    if ((int) threadIdx.x < p->n_hold) {
        held[threadIdx.x] = x[p->hold[threadIdx.x]];
    }

    __syncthreads();

    if ((int) threadIdx.x < p->n_hold) {
        x[p->hold[threadIdx.x]] = -INFINITY;
    }

    finite = 0;
    for (j = 0; j < p->n_hold; j++) {
        finite |= held[j] != -INFINITY;
    }

    __syncthreads();

    for ( ;; ) {
        m = -INFINITY;
        best = VLM_SAMPLE_ALL;
        n_cand = 0;

        for (i = threadIdx.x; i < vocab; i += blockDim.x) {
            v = x[i];
            m = v > m ? v : m;

            if (mask == NULL || v != -INFINITY) {
                key = vlm_sample_key(v, i);
                best = key < best ? key : best;
                n_cand++;
            }
        }

        m = vlm_sample_reduce<vlm_sample_max_op<float> >(m, -INFINITY,
                                                       red);
        best = vlm_sample_reduce<vlm_sample_min_op<uint64_t> >(best,
                                                          VLM_SAMPLE_ALL,
                                                          red);
        n_cand = vlm_sample_reduce<vlm_sample_sum_op<int> >(n_cand, 0, red);

        if (m != -INFINITY || !finite) {
            break;
        }

        if ((int) threadIdx.x < p->n_hold) {
            x[p->hold[threadIdx.x]] = held[threadIdx.x];
        }

        finite = 0;

        __syncthreads();
    }

    if (n_cand == 0 || m == -INFINITY) {
        if (threadIdx.x == 0) {
            out->token = -1;
            out->n_top = 0;
        }

        return;
    }

    sum = 0.0;
    for (i = threadIdx.x; i < vocab; i += blockDim.x) {
        sum += (double) expf(x[i] - m);
    }

    sum = vlm_sample_reduce<vlm_sample_sum_op<double> >(sum, 0.0, red);
    lse = (double) m + log(sum);

    /* the draw */

    s.x = x;
    s.vocab = vocab;
    s.masked = mask != NULL;
    s.limit = VLM_SAMPLE_ALL;
    s.count = 1;
    s.m = m;
    s.t = p->temperature;
    s.minp = 0;
    s.min_p = p->min_p;
    s.sum = 1.0;
    s.best = best;

    if (p->temperature == 0.0f || p->top_k == 1) {
        key = best;

    } else {
        if (p->top_k > 0 && p->top_k < n_cand) {
            s.limit = vlm_sample_select(&s, (double) p->top_k, 0, &h);
        }

        s.count = 0;

        if (p->top_k > 0 && p->top_k <= VLM_SAMPLE_FEW) {
            key = vlm_sample_few(p, &s, p->top_k, cand, &n_few, &drawn);

        } else {
            if (p->top_p < 1.0f || p->min_p > 0.0f) {
                sum = vlm_sample_sum(&s, red);

                if (p->top_p < 1.0f) {
                    limit = vlm_sample_select(&s, (double) p->top_p * sum, 0,
                                              &h);
                    s.limit = limit < s.limit ? limit : s.limit;
                }

                s.minp = p->min_p > 0.0f;
                s.sum = sum;
            }

            sum = vlm_sample_sum(&s, red);
            target = p->uniform * sum;
            key = vlm_sample_select(&s, target, 1, &h);
        }
    }

    tok = (int) (uint32_t) key;

    /* the top log probabilities: the n best of every logit */

    if (p->n_top > 0) {
        s.masked = 0;
        s.limit = VLM_SAMPLE_ALL;
        s.count = 1;
        s.minp = 0;

        limit = vlm_sample_select(&s, (double) p->n_top, 0, &h);

        for (i = threadIdx.x; i < vocab; i += blockDim.x) {
            key = vlm_sample_key(x[i], i);

            if (key <= limit) {
                j = atomicAdd(&n_top, 1);
                if (j < VLM_CUDA_SAMPLE_TOP) {
                    top_key[j] = key;
                }
            }
        }

        __syncthreads();
    }

    if (threadIdx.x != 0) {
        return;
    }

    n_top = n_top < VLM_CUDA_SAMPLE_TOP ? n_top : VLM_CUDA_SAMPLE_TOP;

    for (i = 1; i < n_top; i++) {
        key = top_key[i];
        for (j = i; j > 0 && top_key[j - 1] > key; j--) {
            top_key[j] = top_key[j - 1];
        }
        top_key[j] = key;
    }

    for (i = 0; i < n_top; i++) {
        j = (int) (uint32_t) top_key[i];
        out->top_id[i] = j;
        out->top_logprob[i] = (float) (x[j] - lse);
    }

    out->n_top = n_top;
    out->token = tok;
    out->nan = -1;
    out->logprob = (float) (x[tok] - lse);

    if (p->counts != NULL) {
        p->counts[tok] += 2;
    }
}


extern "C" cudaError_t
vlm_cuda_sample(cudaStream_t s, vlm_cuda_sample_out_t *out,
    const vlm_cuda_sample_row_t *rows, const uint32_t *blob, int n,
    int vocab)
{
    if (n < 0 || vocab <= 0) {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_sample_kernel, n, VLM_SAMPLE_THREADS, 0, s, out, rows,
               blob, vocab);

    return vlm_cuda_launched();
}
