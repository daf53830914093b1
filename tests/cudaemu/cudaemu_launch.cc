/*
 * Kernel launches on the emulated CUDA device: the blocks of the grid one
 * after the other, each block's threads as fibers (a stack each, switched
 * by cudaemu_switch, which saves what the x86-64 ABI has the callee keep)
 * that switch at __syncthreads and at warp operations, so that a block's threads see
 * each other's shared memory writes exactly where CUDA guarantees it.
 * A barrier or a warp operation that cannot complete on hardware (part
 * of the block gone, a lane missing from a mask, a wait forever) fails
 * the launch with a report that names the kernel, the block and the
 * thread.
 *
 * Built with CUDAEMU_RACECHECK (make racecheck-cuda-emu), the kernels
 * under ThreadSanitizer and this file without it: each fiber is a
 * ThreadSanitizer fiber, switched without ordering, and only what CUDA
 * orders is told to it (a block's start after what the host issued
 * before, __syncthreads among the block, __syncwarp among its lanes, the
 * block's end before what the host does next), so that two threads of a
 * block that touch the same memory with nothing of those between them are
 * reported as the data race they are on a GPU, even where the fibers'
 * order here gives the right result.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cudaemu_int.h"

/*
 * under ASan each switch is announced, so that it knows which stack is
 * running (and checks the fibers' frames as it does threads')
 */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ASAN_FIBERS  1
#else
#define ASAN_UNPOISON_MEMORY_REGION(p, n)  ((void) (p), (void) (n))
#endif


#ifndef __x86_64__
#error "the emulated CUDA device switches fibers on x86-64 only"
#endif

#if defined(CUDAEMU_RACECHECK)
#include <sanitizer/tsan_interface.h>

/* ThreadSanitizer's, not in its header: this thread's accesses unseen */
extern "C" void __tsan_ignore_thread_begin(void);
#endif


/* saves the callee-saved registers on this stack, *from = it, runs to */
extern "C" void cudaemu_switch(void **from, void *to);

__asm__(
    ".text\n"
    ".globl cudaemu_switch\n"
    ".type cudaemu_switch, @function\n"
    "cudaemu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size cudaemu_switch, .-cudaemu_switch\n");


namespace cudaemu {

thread_local thread_ctx  *cur_thread;
thread_local const char  *kernel_running;
thread_local block_ctx   *cur_block;


#define FIBER_STACK     (256 * 1024)
#define MAX_THREADS     1024
/*
 * a block's dynamic shared memory: past 48 KiB CUDA refuses a launch
 * unless the kernel opted in (cudaFuncSetAttribute's
 * MaxDynamicSharedMemorySize, up to 227 KiB on sm_90), which no kernel
 * here does
 */
#define MAX_SHARED      (48 * 1024)


struct fiber {
    void       *sp;
    thread_ctx  t;
    bool        done;
    char       *stack;
    void       *fake;           /* ASan's fake stack while switched out */
    void       *tsan;           /* its ThreadSanitizer fiber (racecheck) */
};


/*
 * racecheck: the addresses that carry CUDA's orders to ThreadSanitizer,
 * a block's own (allocated for it and freed after, which forgets them):
 * its start and end, its barrier by generation, and each warp's
 * __syncwarp by generation and by the mask's first lane (disjoint masks
 * of one warp order nothing between them)
 */
struct race_sync {
    char  start;
    char  end;
    char  bar[2];
    char  warp[32][4][32];
};

/*
 * a warp's exchange: each lane's value of its last two warp operations
 * and how many it has made; plane[] holds bits 0 and 1 of those counts,
 * a bit a lane, so that whom a lane still waits for is a few operations
 * on masks.  Every lane of a warp takes its warp operations in the same
 * order (as on hardware with full masks); then, while a lane waits at
 * its g-th, every other lane has made g, g + 1 or g + 2 of them, which
 * their counts modulo 4 tell apart
 */
struct warp {
    unsigned long long  val[2][32];
    unsigned            gen[32];
    unsigned            plane[2];
    unsigned            lanes;          /* those the block has */
    unsigned            exited;         /* those whose thread ended */
};

struct run_state {
    const char                    *kernel;
    const std::function<void()>   *body;
    block_ctx           block;
    std::vector<fiber>  fibers;
    std::vector<warp>   warps;
    unsigned            n;
    unsigned            n_done;
    unsigned            bar_arrived;
    unsigned            bar_gen;
    bool                progress;
    bool                failed;
    fiber              *cur;
    race_sync          *sync;           /* racecheck: the block's */
    void               *sched_tsan;     /* racecheck: the scheduler's */
    void               *sched_sp;
    const void         *sched_bottom;   /* the scheduler's stack, for ASan */
    size_t              sched_size;
};

static thread_local run_state  *run;
static thread_local char       *stacks;
static thread_local std::vector<char>  dynamic_shared;
#if defined(CUDAEMU_RACECHECK)
static thread_local void             *tsan_fibers[MAX_THREADS];
#endif


/*
 * racecheck: this fiber's accesses before race_release(a) happen before
 * those of another after its race_acquire(a); otherwise none of theirs
 */
#if defined(CUDAEMU_RACECHECK)
#define race_release(a)  __tsan_release(a)
#define race_acquire(a)  __tsan_acquire(a)

/*
 * a process forked by a test (a planted fault's) is not checked: in the
 * child ThreadSanitizer no longer knows what ordered the parent's fibers'
 * accesses, and would report them
 */
static bool  race_forked;


static void
race_fork_child()
{
    race_forked = true;
    __tsan_ignore_thread_begin();
}


__attribute__((constructor)) static void
race_init()
{
    pthread_atfork(NULL, NULL, race_fork_child);
}

#else
#define race_release(a)
#define race_acquire(a)
#endif


static void
fail_here(const char *fmt, ...) __attribute__((format(printf, 1, 2)));


static void
wait_turn()
{
#ifdef ASAN_FIBERS
    fiber  *f = run->cur;

    /* a fiber done for good has no frames to keep */
    __sanitizer_start_switch_fiber(f->done || run->failed ? NULL : &f->fake,
                                   run->sched_bottom, run->sched_size);
    cudaemu_switch(&f->sp, run->sched_sp);
    __sanitizer_finish_switch_fiber(f->fake, NULL, NULL);
#else
#if defined(CUDAEMU_RACECHECK)
    __tsan_switch_to_fiber(run->sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
    cudaemu_switch(&run->cur->sp, run->sched_sp);
#endif
}


/* from the scheduler to fiber f, until it switches back */
static void
resume(run_state *r, fiber *f)
{
#ifdef ASAN_FIBERS
    void  *fake = NULL;

    __sanitizer_start_switch_fiber(&fake, f->stack, FIBER_STACK);
    cudaemu_switch(&r->sched_sp, f->sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
#if defined(CUDAEMU_RACECHECK)
    __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#endif
    cudaemu_switch(&r->sched_sp, f->sp);
#endif
}


static void
fail_here(const char *fmt, ...)
{
    va_list  ap;
    char     why[512];
    uint3    b = run->block.idx;
    uint3    t = cur_thread->idx;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);

    report("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s", run->kernel,
           b.x, b.y, b.z, t.x, t.y, t.z, why);

    set_error(cudaErrorLaunchFailure, true);
    run->failed = true;

    for ( ;; ) {
        wait_turn();            /* never resumed */
    }
}


void
fail_launch(const char *kernel, const char *why)
{
    report("kernel %s: %s", kernel, why);
    set_error(cudaErrorLaunchFailure, true);
}


void
syncthreads()
{
    unsigned  g;

    if (run->n_done != 0) {
        fail_here("__syncthreads reached after %u of the block's %u threads "
                  "exited", run->n_done, run->n);
    }

    g = run->bar_gen;
    run->progress = true;
    race_release(&run->sync->bar[g & 1]);

    if (++run->bar_arrived == run->n) {
        run->bar_arrived = 0;
        run->bar_gen++;
        race_acquire(&run->sync->bar[g & 1]);
        return;
    }

    while (run->bar_gen == g) {
        wait_turn();
    }

    race_acquire(&run->sync->bar[g & 1]);
}


/*
 * deposits v for this lane; waits for every lane of mask; their values.
 * Only a __syncwarp (order) orders memory between the lanes: shuffles,
 * votes and the warp matrix functions do not (the CUDA C++ Programming
 * Guide, "Warp Shuffle Functions" and "Warp Vote Functions")
 */
static unsigned long long *
warp_exchange(unsigned mask, unsigned long long v, const char *op,
    bool order = false)
{
    unsigned   l, g, bit, wait, g0, g1;
    warp      *w;

    l = cur_thread->linear % 32;
    w = &run->warps[cur_thread->linear / 32];
    bit = 1u << l;

    if ((mask & bit) == 0) {
        fail_here("%s with mask 0x%08x from lane %u, which it omits", op,
                  mask, l);
    }

    if (mask & ~w->lanes) {
        fail_here("%s with mask 0x%08x: lane %d is not in the block "
                  "(%u threads)", op, mask, __builtin_ctz(mask & ~w->lanes),
                  run->n);
    }

    g = w->gen[l];

    if (order) {
        race_release(&run->sync->warp[cur_thread->linear / 32][g & 3]
                                     [__builtin_ctz(mask)]);
    }

    w->val[g & 1][l] = v;
    w->gen[l] = g + 1;
    w->plane[0] = (w->plane[0] & ~bit) | (((g + 1) & 1) ? bit : 0);
    w->plane[1] = (w->plane[1] & ~bit) | (((g + 1) & 2) ? bit : 0);
    run->progress = true;

    g0 = (g & 1) ? ~0u : 0;
    g1 = (g & 2) ? ~0u : 0;

    for ( ;; ) {
        /* the lanes still at g: their count is g modulo 4 */
        wait = mask & ~(w->plane[0] ^ g0) & ~(w->plane[1] ^ g1);

        if (wait == 0) {
            if (order) {
                race_acquire(&run->sync->warp[cur_thread->linear / 32][g & 3]
                                             [__builtin_ctz(mask)]);
            }

            return w->val[g & 1];
        }

        if (wait & w->exited) {
            fail_here("%s with mask 0x%08x: lane %d exited without it", op,
                      mask, __builtin_ctz(wait & w->exited));
        }

        wait_turn();
    }
}


unsigned long long
shfl(unsigned mask, unsigned long long v, int src, const char *op)
{
    unsigned long long  *vals;

    vals = warp_exchange(mask, v, op);

    if (src < 0 || src > 31 || (mask & (1u << src)) == 0) {
        fail_here("%s with mask 0x%08x reads lane %d, outside the mask", op,
                  mask, src);
    }

    return vals[src];
}


void
syncwarp(unsigned mask)
{
    warp_exchange(mask, 1, "__syncwarp", true);
}


unsigned
ballot(unsigned mask, int pred, const char *op)
{
    unsigned long long  *vals;
    unsigned             m, r;

    vals = warp_exchange(mask, pred != 0, op);

    r = 0;
    for (m = 0; m < 32; m++) {
        if ((mask & (1u << m)) && vals[m]) {
            r |= 1u << m;
        }
    }

    return r;
}


void
kernel_fault(const void *addr)
{
    uint3  b = run->block.idx;
    uint3  t = cur_thread->idx;

    report("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): an illegal "
           "memory access at %p (outside the allocations it was given)",
           run->kernel, b.x, b.y, b.z, t.x, t.y, t.z, addr);

    set_error(cudaErrorIllegalAddress, true);
    run->failed = true;

    for ( ;; ) {
        wait_turn();            /* never resumed */
    }
}


/* a fiber's life: the kernel, then back to the scheduler for good */
static void
fiber_main()
{
#ifdef ASAN_FIBERS
    __sanitizer_finish_switch_fiber(NULL, &run->sched_bottom,
                                    &run->sched_size);
#endif

#if defined(CUDAEMU_RACECHECK)
    if (race_forked) {
        __tsan_ignore_thread_begin();
    }
#endif

    race_acquire(&run->sync->start);

    (*run->body)();

    race_release(&run->sync->end);

    run->cur->done = true;
    run->warps[run->cur->t.linear / 32].exited |=
        1u << (run->cur->t.linear % 32);
    run->n_done++;
    run->progress = true;

    if (run->bar_arrived != 0) {
        fail_here("exited while %u threads of the block wait at "
                  "__syncthreads", run->bar_arrived);
    }

    for ( ;; ) {
        wait_turn();            /* never resumed */
    }
}


/* a stack whose first switch to it returns into fiber_main */
static void *
fiber_stack(char *stack, size_t size)
{
    uintptr_t   top;
    uint64_t   *sp;
    uint32_t    csr[2] = { 0, 0 };

    top = ((uintptr_t) stack + size) & ~(uintptr_t) 15;
    sp = (uint64_t *) (top - 16);

    sp[0] = (uint64_t) (uintptr_t) fiber_main;
    sp[1] = 0;                              /* fiber_main's return */

    __asm__ volatile ("stmxcsr %0\n\tfnstcw %1" : "=m" (csr[0]),
                      "=m" (csr[1]));

    sp -= 7;                                /* rbp .. r15 and the csrs */
    memset(sp, 0, 7 * sizeof(uint64_t));
    memcpy(sp, csr, sizeof(csr));

    return sp;
}


static bool run_fibers(run_state *r);


static bool
run_block(run_state *r)
{
    bool      ok;
    unsigned  i, left;
    fiber    *f;

    r->n_done = 0;
    r->bar_arrived = 0;
    r->bar_gen = 0;
    memset(r->warps.data(), 0, r->warps.size() * sizeof(warp));

    for (i = 0; i < r->warps.size(); i++) {
        left = r->n - i * 32;
        r->warps[i].lanes = left >= 32 ? ~0u : (1u << left) - 1;
    }

    for (i = 0; i < r->n; i++) {
        f = &r->fibers[i];
        f->done = false;
        f->fake = NULL;
        f->stack = stacks + (size_t) i * FIBER_STACK;
        /* the frames of fibers abandoned by a failed launch */
        ASAN_UNPOISON_MEMORY_REGION(f->stack, FIBER_STACK);
        f->sp = fiber_stack(f->stack, FIBER_STACK);
#if defined(CUDAEMU_RACECHECK)
        if (tsan_fibers[i] == NULL) {
            tsan_fibers[i] = __tsan_create_fiber(0);
        }

        f->tsan = tsan_fibers[i];
#endif
    }

#if defined(CUDAEMU_RACECHECK)
    r->sched_tsan = __tsan_get_current_fiber();
    r->sync = (race_sync *) calloc(1, sizeof(race_sync));
    if (r->sync == NULL) {
        report("kernel %s: no memory for the race check", r->kernel);
        set_error(cudaErrorLaunchFailure, true);
        return false;
    }

    /* what the host issued before, and the blocks before this one */
    race_release(&r->sync->start);
#endif

    ok = run_fibers(r);

#if defined(CUDAEMU_RACECHECK)
    race_acquire(&r->sync->end);
    free(r->sync);              /* and the orders it held */
    r->sync = NULL;

    if (!ok) {
        /* their frames are abandoned: fresh fibers for the next launch */
        for (i = 0; i < r->n; i++) {
            __tsan_destroy_fiber(tsan_fibers[i]);
            tsan_fibers[i] = NULL;
        }
    }
#endif

    return ok;
}


/* the block's threads, each until its next switch, until all are done */
static bool
run_fibers(run_state *r)
{
    unsigned  i, left;
    fiber    *f;

    for ( ;; ) {
        r->progress = false;
        left = 0;

        for (i = 0; i < r->n; i++) {
            f = &r->fibers[i];
            if (f->done) {
                continue;
            }

            r->cur = f;
            cur_thread = &f->t;
            resume(r, f);

            if (r->failed) {
                return false;
            }

            left += !f->done;
        }

        if (left == 0) {
            return true;
        }

        if (!r->progress) {
            for (i = 0; i < r->n && r->fibers[i].done; i++) { /* void */ }
            cur_thread = &r->fibers[i].t;
            report("kernel %s, block (%u,%u,%u): %u threads wait forever "
                   "(a barrier or warp operation that part of the block "
                   "never reaches)", r->kernel, r->block.idx.x,
                   r->block.idx.y, r->block.idx.z, left);
            set_error(cudaErrorLaunchFailure, true);
            return false;
        }
    }
}


/*
 * CUDAEMU_FAULT=kernel:n[,kernel:n...]: the n-th launch (from 1) of that
 * kernel faults when it runs, as an illegal address does on a GPU
 */
static bool
fault_planned(const char *kernel)
{
    static std::mutex                  flock;
    static std::map<std::string, int>  seen;
    const char                        *env, *p, *colon;
    size_t                             len;
    int                                n;

    env = getenv("CUDAEMU_FAULT");
    if (env == NULL || *env == '\0') {
        return false;
    }

    std::lock_guard<std::mutex>  g(flock);

    len = strlen(kernel);
    n = ++seen[kernel];

    for (p = env; p != NULL; p = strchr(p, ',')) {
        p += *p == ',';
        colon = strchr(p, ':');

        if (colon != NULL && (size_t) (colon - p) == len
            && strncmp(p, kernel, len) == 0 && atoi(colon + 1) == n)
        {
            return true;
        }
    }

    return false;
}


/*
 * the profile: per kernel name, its launches and their CPU time, kept by
 * every thread that runs device work; the file is written again every 5
 * seconds of work and at exit (a process that ends by _exit or a signal
 * leaves the last one)
 */
struct profile_entry {
    unsigned long  calls;
    double         secs;
};

static std::mutex                             profile_lock;
static std::map<std::string, profile_entry>  *profile_table;
static int                                    profile_on = -1;
static double                                 profile_written;


static double
profile_clock(clockid_t id)
{
    struct timespec  ts;

    clock_gettime(id, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* with profile_lock held */
static void
profile_write_locked()
{
    char                                                    path[4096];
    FILE                                                   *f;
    std::vector<std::pair<std::string, profile_entry>>     v;

    snprintf(path, sizeof(path), "%s.%d", getenv("CUDAEMU_PROFILE"),
             (int) getpid());

    f = fopen(path, "w");
    if (f == NULL) {
        return;
    }

    v.assign(profile_table->begin(), profile_table->end());
    std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) {
        return a.second.secs > b.second.secs;
    });

    for (auto &e : v) {
        fprintf(f, "%10.3f s %10lu  %s\n", e.second.secs, e.second.calls,
                e.first.c_str());
    }

    fclose(f);
    profile_written = profile_clock(CLOCK_MONOTONIC);
}


static void
profile_write()
{
    std::lock_guard<std::mutex>  g(profile_lock);

    profile_write_locked();
}


double
profile_start()
{
    const char  *env;

    if (profile_on < 0) {
        std::lock_guard<std::mutex>  g(profile_lock);

        if (profile_on < 0) {
            env = getenv("CUDAEMU_PROFILE");
            profile_on = env != NULL && *env != '\0';

            if (profile_on) {
                profile_table = new std::map<std::string, profile_entry>;
                profile_written = profile_clock(CLOCK_MONOTONIC);
                atexit(profile_write);
            }
        }
    }

    return profile_on ? profile_clock(CLOCK_THREAD_CPUTIME_ID) : 0;
}


void
profile_stop(const char *name, double start)
{
    double  now;

    if (start == 0) {
        return;
    }

    now = profile_clock(CLOCK_THREAD_CPUTIME_ID);

    std::lock_guard<std::mutex>  g(profile_lock);

    profile_entry  &e = (*profile_table)[name];

    e.calls++;
    e.secs += now - start;

    if (profile_clock(CLOCK_MONOTONIC) - profile_written > 5) {
        profile_write_locked();
    }
}


static void
run_grid(const char *kernel, dim3 grid, dim3 block, size_t shared,
    const std::function<void()> *body)
{
    run_state  r;
    unsigned   i, x, y, z;

    if (stacks == NULL) {
        stacks = (char *) mmap(NULL, (size_t) MAX_THREADS * FIBER_STACK,
                               PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                               -1, 0);
        if (stacks == MAP_FAILED) {
            stacks = NULL;
            report("kernel %s: no memory for the threads' stacks", kernel);
            set_error(cudaErrorLaunchFailure, true);
            return;
        }
    }

    /* what a kernel finds in fresh shared memory is not zero */
    dynamic_shared.assign(shared + 16, (char) 0xa5);

    r.n = block.x * block.y * block.z;
    r.kernel = kernel;
    r.body = body;
    r.block.dim = block;
    r.block.grid = grid;
    r.block.dynamic_shared = shared ? dynamic_shared.data() : NULL;
    r.fibers.resize(r.n);
    r.warps.resize((r.n + 31) / 32);
    r.failed = false;
    r.sync = NULL;
    r.sched_tsan = NULL;

    for (i = 0; i < r.n; i++) {
        r.fibers[i].t.idx.x = i % block.x;
        r.fibers[i].t.idx.y = i / block.x % block.y;
        r.fibers[i].t.idx.z = i / (block.x * block.y);
        r.fibers[i].t.linear = i;
    }

    device_open  open;

    run = &r;
    cur_block = &r.block;
    kernel_running = kernel;

    for (z = 0; z < grid.z; z++) {
        for (y = 0; y < grid.y; y++) {
            for (x = 0; x < grid.x; x++) {
                r.block.idx.x = x;
                r.block.idx.y = y;
                r.block.idx.z = z;

                if (!run_block(&r)) {
                    goto done;
                }
            }
        }
    }

done:

    run = NULL;
    cur_block = NULL;
    cur_thread = NULL;
    kernel_running = NULL;
}


/* the kernel launches taken, eager or into a capture (the tests') */
static std::atomic<unsigned long>  kernel_launches;


void
launch(const char *kernel, dim3 grid, dim3 block, size_t shared,
    void *stream, std::function<void()> body)
{
    unsigned  n;
    char      why[160];

    if (sticky_error() != cudaSuccess) {
        return;
    }

    n = block.x * block.y * block.z;

    if (n == 0 || n > MAX_THREADS || block.z > 64 || grid.x == 0
        || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535
        || shared > MAX_SHARED)
    {
        snprintf(why, sizeof(why), "launch of grid (%u,%u,%u), block "
                 "(%u,%u,%u), %zu bytes of shared memory: invalid", grid.x,
                 grid.y, grid.z, block.x, block.y, block.z, shared);
        report("kernel %s: %s", kernel, why);
        set_error(cudaErrorInvalidConfiguration, false);
        return;
    }

    if (!stream_valid((cudaStream_t) stream)) {
        report("kernel %s: launched to a stream that does not exist",
               kernel);
        set_error(cudaErrorInvalidResourceHandle, false);
        return;
    }

    kernel_launches++;

    if (fault_planned(kernel)) {
        enqueue((cudaStream_t) stream, [kernel] {
            report("kernel %s: an illegal memory access (CUDAEMU_FAULT)",
                   kernel);
            set_error(cudaErrorIllegalAddress, true);
        });
        return;
    }

    enqueue((cudaStream_t) stream,
            [kernel, grid, block, shared, body = std::move(body)] {
                double  t = profile_start();

                run_grid(kernel, grid, block, shared, &body);
                profile_stop(kernel, t);
            });
}

} /* namespace cudaemu */


unsigned long
cudaemu_kernel_launches(void)
{
    return cudaemu::kernel_launches.load();
}
