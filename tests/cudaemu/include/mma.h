/*
 * The warp matrix functions (nvcuda::wmma) on the emulated CUDA device:
 * the tensor cores' tiles of bf16 or half inputs with float (or half)
 * accumulators, in the shapes CUDA offers for them (m16n16k16, m32n8k16,
 * m8n32k16).
 *
 * CUDA leaves unspecified which elements of a tile a lane's fragment
 * holds; kernels may only treat fragment.x[] element by element.  Here
 * every lane holds the whole tile (num_elements = the tile's size), which
 * any such kernel computes the same with.  Each operation is collective
 * as on hardware: all 32 lanes of the warp must call it together, or the
 * launch fails with a report naming it.  mma_sync multiplies exactly
 * (a product of two 16-bit floats fits a float) and adds in float, in k
 * order; a half accumulator is rounded at each step.
 */

#ifndef CUDAEMU_MMA_H
#define CUDAEMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"


namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};

enum layout_t {
    mem_row_major,
    mem_col_major
};


namespace detail {

template <typename Use, int M, int N, int K>
struct dims;

template <int M, int N, int K>
struct dims<matrix_a, M, N, K> {
    static const int  rows = M, cols = K;
};

template <int M, int N, int K>
struct dims<matrix_b, M, N, K> {
    static const int  rows = K, cols = N;
};

template <int M, int N, int K>
struct dims<accumulator, M, N, K> {
    static const int  rows = M, cols = N;
};


static inline float
to_float(float v)
{
    return v;
}

static inline float
to_float(__half v)
{
    return __half2float(v);
}

static inline float
to_float(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}


template <typename T>
static inline T
from_float(float v);

template <>
inline float
from_float<float>(float v)
{
    return v;
}

template <>
inline __half
from_float<__half>(float v)
{
    return __float2half(v);
}


/* every lane of the warp, or a report naming op and a failed launch */
static inline void
collective(const char *op)
{
    cudaemu::ballot(0xffffffffu, 1, op);
}


template <int M, int N, int K>
static inline void
shape_ok()
{
    static_assert((M == 16 && N == 16 && K == 16)
                  || (M == 32 && N == 8 && K == 16)
                  || (M == 8 && N == 32 && K == 16),
                  "wmma: a shape CUDA has for 16-bit inputs");
}

} /* namespace detail */


template <typename Use, int M, int N, int K, typename T,
          typename Layout = void>
class fragment {
public:
    static const int  num_elements = detail::dims<Use, M, N, K>::rows
                                     * detail::dims<Use, M, N, K>::cols;
    T  x[num_elements];
};


template <typename Use, int M, int N, int K, typename T, typename L>
static inline void
fill_fragment(fragment<Use, M, N, K, T, L> &f, const T &v)
{
    int  i;

    detail::shape_ok<M, N, K>();
    detail::collective("wmma::fill_fragment");

    for (i = 0; i < f.num_elements; i++) {
        f.x[i] = v;
    }
}


/* an input tile: element (r, c) at p[r * ldm + c] (row_major) */
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void
load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm)
{
    int  r, c, rows, cols;
    bool row = std::is_same<L, row_major>::value;

    static_assert(!std::is_same<Use, accumulator>::value,
                  "wmma: an accumulator is loaded with its layout");

    detail::shape_ok<M, N, K>();
    detail::collective("wmma::load_matrix_sync");

    rows = detail::dims<Use, M, N, K>::rows;
    cols = detail::dims<Use, M, N, K>::cols;

    for (r = 0; r < rows; r++) {
        for (c = 0; c < cols; c++) {
            f.x[r * cols + c] = row ? p[(size_t) r * ldm + c]
                                    : p[(size_t) c * ldm + r];
        }
    }
}


template <int M, int N, int K, typename T>
static inline void
load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p,
    unsigned ldm, layout_t layout)
{
    int  r, c;

    detail::shape_ok<M, N, K>();
    detail::collective("wmma::load_matrix_sync");

    for (r = 0; r < M; r++) {
        for (c = 0; c < N; c++) {
            f.x[r * N + c] = layout == mem_row_major ? p[(size_t) r * ldm + c]
                                                     : p[(size_t) c * ldm + r];
        }
    }
}


template <int M, int N, int K, typename T>
static inline void
store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f,
    unsigned ldm, layout_t layout)
{
    int  r, c;

    detail::shape_ok<M, N, K>();
    detail::collective("wmma::store_matrix_sync");

    /*
     * every lane writes the same values: one store as far as memory sees;
     * under racecheck each element is written by the lane that holds it
     * in the PTX ISA's mma.m16n8k16 accumulator (lanes 4q to 4q + 3 the
     * rows q, q + 8, ..., two adjacent columns each in every eight):
     * which lane holds which is unspecified for wmma, and this is a GPU's
     * layout, so that a read of the tile by another lane before a
     * __syncwarp is the race it is on a GPU
     */
    for (r = 0; r < M; r++) {
        for (c = 0; c < N; c++) {
#if defined(CUDAEMU_RACECHECK)
            if ((r % 8) * 4 + (c % 8) / 2 != cudaemu::lane()) {
                continue;
            }
#endif
            if (layout == mem_row_major) {
                p[(size_t) r * ldm + c] = f.x[r * N + c];

            } else {
                p[(size_t) c * ldm + r] = f.x[r * N + c];
            }
        }
    }
}


/* d = a b + c */
template <int M, int N, int K, typename Ta, typename La, typename Lb,
          typename Tc, typename Td>
static inline void
mma_sync(fragment<accumulator, M, N, K, Td> &d,
    const fragment<matrix_a, M, N, K, Ta, La> &a,
    const fragment<matrix_b, M, N, K, Ta, Lb> &b,
    const fragment<accumulator, M, N, K, Tc> &c)
{
    int    i, j, l;
    float  acc;
    Td     out[M * N];

    static_assert(std::is_same<Ta, __half>::value
                  || std::is_same<Ta, __nv_bfloat16>::value,
                  "wmma: the inputs are half or __nv_bfloat16");

    detail::shape_ok<M, N, K>();
    detail::collective("wmma::mma_sync");

    for (i = 0; i < M; i++) {
        for (j = 0; j < N; j++) {
            acc = detail::to_float(c.x[i * N + j]);

            for (l = 0; l < K; l++) {
                acc += detail::to_float(a.x[i * K + l])
                       * detail::to_float(b.x[l * N + j]);

                if (std::is_same<Td, __half>::value) {
                    acc = detail::to_float(detail::from_float<__half>(acc));
                }
            }

            out[i * N + j] = detail::from_float<Td>(acc);
        }
    }

    for (i = 0; i < M * N; i++) {
        d.x[i] = out[i];
    }
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif /* CUDAEMU_MMA_H */
