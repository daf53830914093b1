/*
 * The device side of the emulated CUDA device, for the kernels compiled
 * by the host C++ compiler: the CUDA qualifiers, the vector types, the
 * thread and block indices, shared memory, __syncthreads, warp shuffles
 * and votes, atomics, and the launch that VLM_LAUNCH expands to.
 *
 * A block's threads are fibers on one OS thread; they switch only at
 * __syncthreads and at warp operations, so __shared__ (a static
 * thread_local) is one array per block being run, and plain reads and
 * writes between switches are atomic.  A barrier that part of the block
 * never reaches, a shuffle whose mask names a lane that is missing, a
 * kernel argument that is not device memory: each is reported with the
 * kernel's name and fails the launch as a GPU would, with a sticky error.
 */

#ifndef CUDAEMU_H
#define CUDAEMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>


#define __global__
#define __device__
#define __host__
#define __forceinline__     inline
#define __noinline__        __attribute__((noinline))
#define __align__(n)        __attribute__((aligned(n)))
#define __shared__          static thread_local
#define __launch_bounds__(...)


struct uint3 {
    unsigned  x, y, z;
};

struct dim3 {
    unsigned  x, y, z;

    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1)
        : x(vx), y(vy), z(vz) {}
};

struct float2 {
    float  x, y;
};

struct __attribute__((aligned(16))) float4 {
    float  x, y, z, w;
};

struct __attribute__((aligned(16))) uint4 {
    unsigned  x, y, z, w;
};

static inline uint4
make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}

static inline float2
make_float2(float x, float y)
{
    return float2{x, y};
}

static inline float4
make_float4(float x, float y, float z, float w)
{
    return float4{x, y, z, w};
}


namespace cudaemu {

struct thread_ctx {
    uint3     idx;
    unsigned  linear;           /* x + y * bx + z * bx * by */
};

struct block_ctx {
    uint3     idx;
    dim3      dim;
    dim3      grid;
    void     *dynamic_shared;
};

extern thread_local thread_ctx  *cur_thread;
extern thread_local block_ctx   *cur_block;

void syncthreads();
/* every lane of mask deposits v; returns the value lane src deposited */
unsigned long long shfl(unsigned mask, unsigned long long v, int src,
    const char *op);
/* every lane of mask deposits pred; the lanes whose pred is true */
unsigned ballot(unsigned mask, int pred, const char *op);
/* as ballot, and orders memory among the lanes of mask (__syncwarp) */
void syncwarp(unsigned mask);

/* issues body, to be run by every thread of every block, to stream */
void launch(const char *kernel, dim3 grid, dim3 block, size_t shared,
    void *stream, std::function<void()> body);
/* false (and the launch's error set) when p is not where a kernel may go */
bool check_pointer(const char *kernel, const char *names, int index,
    const void *p);
void fail_launch(const char *kernel, const char *why);


template <typename T>
static inline bool
check_arg(const char *kernel, const char *names, int index, const T &)
{
    return true;
}


template <typename T>
static inline bool
check_arg(const char *kernel, const char *names, int index, T *const &p)
{
    return check_pointer(kernel, names, index, (const void *) p);
}


/* an argument as the kernel's parameter: NULL (an integer) as a pointer */
template <typename P, typename A>
static inline P
convert_arg(A &&a)
{
    if constexpr (std::is_pointer<P>::value
                  && std::is_integral<typename std::decay<A>::type>::value)
    {
        return (P) (uintptr_t) a;

    } else {
        return static_cast<P>(a);
    }
}


template <typename T>
static inline T
shfl_value(unsigned mask, T v, int src, const char *op)
{
    unsigned long long  u = 0;

    static_assert(sizeof(T) <= sizeof(u), "shuffle of more than 8 bytes");

    memcpy(&u, &v, sizeof(T));
    u = shfl(mask, u, src, op);
    memcpy(&v, &u, sizeof(T));

    return v;
}


static inline int
lane()
{
    return (int) (cur_thread->linear % 32);
}

} /* namespace cudaemu */


#define threadIdx  (cudaemu::cur_thread->idx)
#define blockIdx   (cudaemu::cur_block->idx)
#define blockDim   (cudaemu::cur_block->dim)
#define gridDim    (cudaemu::cur_block->grid)


static inline void
__syncthreads()
{
    cudaemu::syncthreads();
}


static inline void
__syncwarp(unsigned mask = 0xffffffffu)
{
    cudaemu::syncwarp(mask);
}


static inline void
__threadfence()
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}


static inline void
__threadfence_block()
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}


template <typename T>
static inline T
__shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    int  l = cudaemu::lane();

    return cudaemu::shfl_value(mask, v, (l & ~(width - 1)) + src % width,
                               "__shfl_sync");
}


template <typename T>
static inline T
__shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    int  l = cudaemu::lane();
    int  s = l ^ lane_mask;

    return cudaemu::shfl_value(mask, v,
                               (s & ~(width - 1)) == (l & ~(width - 1)) ? s
                                                                        : l,
                               "__shfl_xor_sync");
}


template <typename T>
static inline T
__shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int  l = cudaemu::lane();
    int  s = (l % width) + (int) delta;

    return cudaemu::shfl_value(mask, v, s < width ? l + (int) delta : l,
                               "__shfl_down_sync");
}


template <typename T>
static inline T
__shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int  l = cudaemu::lane();
    int  s = (l % width) - (int) delta;

    return cudaemu::shfl_value(mask, v, s >= 0 ? l - (int) delta : l,
                               "__shfl_up_sync");
}


static inline unsigned
__ballot_sync(unsigned mask, int pred)
{
    return cudaemu::ballot(mask, pred, "__ballot_sync");
}


static inline int
__any_sync(unsigned mask, int pred)
{
    return cudaemu::ballot(mask, pred, "__any_sync") != 0;
}


static inline int
__all_sync(unsigned mask, int pred)
{
    return cudaemu::ballot(mask, pred, "__all_sync") == mask;
}


#if defined(CUDAEMU_RACECHECK)

/*
 * racecheck: atomic as far as ThreadSanitizer sees (relaxed, as CUDA's
 * atomics are: they order nothing else)
 */
#define CUDAEMU_ATOMIC(name, update)                                        \
    template <typename T>                                                   \
    static inline T                                                         \
    name(T *p, T v)                                                         \
    {                                                                       \
        T  old, set;                                                        \
                                                                            \
        __atomic_load(p, &old, __ATOMIC_RELAXED);                           \
        do {                                                                \
            set = (update);                                                 \
        } while (!__atomic_compare_exchange(p, &old, &set, false,           \
                                            __ATOMIC_RELAXED,               \
                                            __ATOMIC_RELAXED));             \
        return old;                                                         \
    }

#else

/* the fibers of a block never run at once: plain read-modify-writes */
#define CUDAEMU_ATOMIC(name, update)                                        \
    template <typename T>                                                   \
    static inline T                                                         \
    name(T *p, T v)                                                         \
    {                                                                       \
        T  old = *p;                                                        \
                                                                            \
        *p = (update);                                                      \
        return old;                                                         \
    }

#endif

CUDAEMU_ATOMIC(atomicAdd, old + v)
CUDAEMU_ATOMIC(atomicMax, old < v ? v : old)
CUDAEMU_ATOMIC(atomicMin, v < old ? v : old)
CUDAEMU_ATOMIC(atomicExch, v)


template <typename T>
static inline T
atomicCAS(T *p, T cmp, T v)
{
#if defined(CUDAEMU_RACECHECK)
    __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
    return cmp;
#else
    T  old = *p;

    if (old == cmp) {
        *p = v;
    }
    return old;
#endif
}


template <typename T>
static inline T
__ldg(const T *p)
{
    return *p;
}


#define CUDAEMU_MINMAX(T)                                                   \
    static inline T min(T a, T b) { return b < a ? b : a; }                 \
    static inline T max(T a, T b) { return a < b ? b : a; }

CUDAEMU_MINMAX(int)
CUDAEMU_MINMAX(unsigned)
CUDAEMU_MINMAX(long)
CUDAEMU_MINMAX(unsigned long)
CUDAEMU_MINMAX(long long)
CUDAEMU_MINMAX(unsigned long long)
CUDAEMU_MINMAX(float)
CUDAEMU_MINMAX(double)


/* CUDA's rsqrtf is within 2 ulp; the emulator's is correctly rounded */
static inline float
rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}


static inline double
rsqrt(double x)
{
    return 1.0 / sqrt(x);
}


static inline void *
cudaemu_dynamic_shared()
{
    return cudaemu::cur_block->dynamic_shared;
}


/*
 * kernel<<<grid, block, shared, stream>>>(args): the arguments are
 * converted to the kernel's parameter types and copied as a launch
 * copies them; each pointer among them is checked before any block runs
 */
template <typename... P, typename... A>
static inline void
cudaemu_launch(const char *kernel, void (*k)(P...), dim3 grid, dim3 block,
    size_t shared, void *stream, const char *names, A &&...a)
{
    typedef std::tuple<typename std::decay<P>::type...>  args_t;

    /* copied as a launch copies them: the kernel runs later */
    auto  args = std::make_shared<args_t>(cudaemu::convert_arg<P>(a)...);
    int   i = 0;
    bool  ok = true;

    std::apply([&](const auto &...v) {
        ((ok = cudaemu::check_arg(kernel, names, i++, v) && ok), ...);
    }, *args);

    if (!ok) {
        return;
    }

    cudaemu::launch(kernel, grid, block, shared, stream,
                    [k, args] { std::apply(k, *args); });
}

#endif /* CUDAEMU_H */
