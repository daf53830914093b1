/*
 * NCCL on the emulated CUDA device, between real rank processes: the
 * unique id names a POSIX shared memory segment, where ncclCommInitRank()
 * meets the other ranks and every collective moves its data, a chunk at
 * a time, so that any size goes through a segment of fixed size.
 *
 * The segment holds a header (the group's size, the ranks that came, a
 * barrier, the group's error) and two sets of one chunk a rank.  A round
 * of a collective writes this rank's part of a chunk into its slot of the
 * round's set, meets the others in the barrier and reads what it needs
 * from every slot; the next round uses the other set, and a rank that
 * writes a set again has passed the barrier after which every rank had
 * finished reading it, so that a round costs one barrier.  A sum is
 * computed by every rank in rank order: the same bits on every rank.
 *
 * As NCCL does, it refuses two ranks on one device (the current device
 * of the thread that creates the communicator).
 *
 * As NCCL's, a collective is ordered on its stream: the stream is
 * synchronized first (its work ran as it was issued), then the data move
 * with device memory open to the host, and the call returns when every
 * rank took part.  In a stream capture it is recorded, as NCCL's kernels
 * are: each launch of the graph moves the data in its turn among the
 * graph's work (its failure then the group's error).  Its buffers must
 * be device memory of the emulator, in one allocation: a host pointer,
 * or a count that runs past the allocation, is ncclInvalidArgument with
 * a report naming the call.
 *
 * A rank holds a lock on a byte of the segment's file, which the kernel
 * releases when the process dies: a rank that waits sees a peer that is
 * gone (dead, or left the group) and fails with ncclRemoteError, as it
 * does after CUDAEMU_NCCL_TIMEOUT seconds (by default 120) without
 * progress (a rank that never comes).  The error is the group's: every
 * later collective of every rank returns it, and ncclCommGetAsyncError()
 * reports it.  The segment's name is unlinked once every rank mapped it,
 * and by ncclCommAbort() and ncclCommDestroy() when that never happened.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <atomic>
#include <new>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cudaemu_int.h"
#include "nccl.h"


using namespace cudaemu;


#define NCCL_MAX_RANKS   16
#define NCCL_CHUNK       ((size_t) 1 << 20)     /* bytes a rank, a round */
#define NCCL_MAGIC       0x6c63636e756d6563ULL  /* "cemunccl" */
#define NCCL_ID_PREFIX   "/cudaemu-nccl-"
#define NCCL_POLL_NS     20000000L              /* peers checked at 20 ms */


namespace {

struct seg_hdr {
    std::atomic<uint64_t>  magic;
    int32_t                n_ranks;
    std::atomic<uint32_t>  joined;          /* futex word */
    std::atomic<uint32_t>  arrived;
    std::atomic<uint32_t>  gen;             /* futex word: barriers done */
    std::atomic<int32_t>   error;           /* the group's ncclResult_t */
    int32_t                device[NCCL_MAX_RANKS];  /* by rank */
};

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "process-shared atomics");

#define NCCL_HDR_BYTES  4096

} /* namespace */


struct cudaemu_nccl_s {
    int            rank;
    int            n_ranks;
    int            fd;
    char           name[sizeof(ncclUniqueId)];
    size_t         size;
    seg_hdr       *hdr;
    char          *data;                    /* [2][n_ranks][NCCL_CHUNK] */
    unsigned       round;                   /* rounds done: the set */
    ncclResult_t   error;                   /* this rank's, sticky */
    double         timeout;                 /* seconds */
};


namespace {

static double
now()
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}


static double
timeout_s()
{
    const char  *s;
    double       t;

    s = getenv("CUDAEMU_NCCL_TIMEOUT");
    t = s != NULL ? atof(s) : 0.0;

    return t > 0.0 ? t : 120.0;
}


static void
futex_wait(std::atomic<uint32_t> *w, uint32_t v)
{
    struct timespec  ts = { 0, NCCL_POLL_NS };

    /* a shared mapping: not FUTEX_PRIVATE_FLAG */
    (void) syscall(SYS_futex, (uint32_t *) w, FUTEX_WAIT, v, &ts, NULL, 0);
}


static void
futex_wake(std::atomic<uint32_t> *w)
{
    (void) syscall(SYS_futex, (uint32_t *) w, FUTEX_WAKE, INT_MAX, NULL,
                   NULL, 0);
}


/* a rank's byte of the file: locked by the rank while it is in the group */
static int
lock_rank(int fd, int rank, int cmd, short type)
{
    struct flock  fl;

    memset(&fl, 0, sizeof(fl));
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = rank;
    fl.l_len = 1;

    if (fcntl(fd, cmd, &fl) == -1) {
        return -1;
    }

    return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}


/* the first peer that is gone, or -1 */
static int
peer_gone(ncclComm_t c)
{
    int  r;

    for (r = 0; r < c->n_ranks; r++) {
        if (r != c->rank && lock_rank(c->fd, r, F_OFD_GETLK, F_WRLCK) == 0) {
            return r;
        }
    }

    return -1;
}


/* the group's error: set once, seen by every rank */
static ncclResult_t
fail(ncclComm_t c, ncclResult_t e)
{
    int32_t  none = ncclSuccess;

    c->hdr->error.compare_exchange_strong(none, (int32_t) e);
    c->error = (ncclResult_t) c->hdr->error.load();
    futex_wake(&c->hdr->gen);
    futex_wake(&c->hdr->joined);

    return c->error;
}


static ncclResult_t
group_error(ncclComm_t c)
{
    if (c->error == ncclSuccess) {
        c->error = (ncclResult_t) c->hdr->error.load();
    }

    return c->error;
}


/*
 * waits until *w is no longer v (joined: until it is n_ranks); peers are
 * checked between waits
 */
static ncclResult_t
wait_while(ncclComm_t c, std::atomic<uint32_t> *w, uint32_t v,
    const char *what)
{
    int     gone;
    double  start;

    start = now();

    for ( ;; ) {
        if (w->load(std::memory_order_acquire) != v) {
            return ncclSuccess;
        }

        if (group_error(c) != ncclSuccess) {
            return c->error;
        }

        futex_wait(w, v);

        if (w->load(std::memory_order_acquire) != v) {
            return ncclSuccess;
        }

        /* a rank that has not come yet holds no lock: not in the count */
        gone = w == &c->hdr->gen ? peer_gone(c) : -1;

        if (gone >= 0 && w->load(std::memory_order_acquire) == v) {
            report("nccl rank %d of %d: %s: rank %d is gone", c->rank,
                   c->n_ranks, what, gone);
            return fail(c, ncclRemoteError);
        }

        if (now() - start > c->timeout) {
            report("nccl rank %d of %d: %s: the other ranks did not come "
                   "in %g s", c->rank, c->n_ranks, what, c->timeout);
            return fail(c, ncclRemoteError);
        }
    }
}


static ncclResult_t
barrier(ncclComm_t c, const char *what)
{
    uint32_t   g;
    seg_hdr   *h = c->hdr;

    g = h->gen.load(std::memory_order_acquire);

    if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1
        == (uint32_t) c->n_ranks)
    {
        h->arrived.store(0, std::memory_order_relaxed);
        h->gen.fetch_add(1, std::memory_order_release);
        futex_wake(&h->gen);
        return ncclSuccess;
    }

    return wait_while(c, &h->gen, g, what);
}


static size_t
type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}


template <typename T>
static inline T
combine(T a, T b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: return (T) (a * b);
    case ncclMax: return b > a ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return (T) (a + b);
    }
}


/* out[i] = the slots' [i] reduced in rank order; T the arithmetic type */
template <typename T, typename S>
static void
reduce_as(void *out, char *const *slots, int n_slots, size_t n,
    ncclRedOp_t op, T (*load)(S), S (*store)(T))
{
    int     r;
    T       acc;
    S       s;
    size_t  i;

    for (i = 0; i < n; i++) {
        memcpy(&s, slots[0] + i * sizeof(S), sizeof(S));
        acc = load(s);

        for (r = 1; r < n_slots; r++) {
            memcpy(&s, slots[r] + i * sizeof(S), sizeof(S));
            acc = combine(acc, load(s), op);
        }

        if (op == ncclAvg) {
            acc = (T) (acc / (T) n_slots);
        }

        s = store(acc);
        memcpy((char *) out + i * sizeof(S), &s, sizeof(S));
    }
}


template <typename T>
static T
same(T v)
{
    return v;
}


static float
from_bf16(__nv_bfloat16 h)
{
    return __bfloat162float(h);
}


static __nv_bfloat16
to_bf16(float f)
{
    return __float2bfloat16_rn(f);
}


static float
from_f16(__half h)
{
    return __half2float(h);
}


static __half
to_f16(float f)
{
    return __float2half_rn(f);
}


template <typename T>
static void
reduce_plain(void *out, char *const *slots, int n_slots, size_t n,
    ncclRedOp_t op)
{
    reduce_as<T, T>(out, slots, n_slots, n, op, same<T>, same<T>);
}


static void
reduce(void *out, char *const *slots, int n_slots, size_t n,
    ncclDataType_t t, ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8: reduce_plain<int8_t>(out, slots, n_slots, n, op); break;
    case ncclUint8: reduce_plain<uint8_t>(out, slots, n_slots, n, op); break;
    case ncclInt32: reduce_plain<int32_t>(out, slots, n_slots, n, op); break;
    case ncclUint32:
        reduce_plain<uint32_t>(out, slots, n_slots, n, op);
        break;
    case ncclInt64: reduce_plain<int64_t>(out, slots, n_slots, n, op); break;
    case ncclUint64:
        reduce_plain<uint64_t>(out, slots, n_slots, n, op);
        break;
    case ncclFloat32: reduce_plain<float>(out, slots, n_slots, n, op); break;
    case ncclFloat64: reduce_plain<double>(out, slots, n_slots, n, op); break;
    case ncclFloat16:
        reduce_as<float, __half>(out, slots, n_slots, n, op, from_f16,
                                 to_f16);
        break;
    case ncclBfloat16:
        reduce_as<float, __nv_bfloat16>(out, slots, n_slots, n, op,
                                        from_bf16, to_bf16);
        break;
    }
}


/* p .. p + size: device memory of the emulator, in one allocation */
static bool
device_buffer(const char *call, const char *name, const void *p,
    size_t size)
{
    region  r;

    if (find(p, &r) != MEM_DEVICE) {
        report("%s: %s %p is not device memory", call, name, p);
        return false;
    }

    if (size > r.size - (size_t) ((const char *) p - r.base)) {
        report("%s: %s %p: %zu bytes run past its allocation of %zu at %p",
               call, name, p, size, r.size, (void *) r.base);
        return false;
    }

    return true;
}


enum coll_kind {
    COLL_ALL_REDUCE,
    COLL_ALL_GATHER,
    COLL_BROADCAST
};


static ncclResult_t move(const char *call, coll_kind kind, const void *send,
    void *recv, size_t bytes, size_t es, ncclDataType_t type, ncclRedOp_t op,
    int root, ncclComm_t c);


static ncclResult_t
collective(const char *call, coll_kind kind, const void *send, void *recv,
    size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
    ncclComm_t c, cudaStream_t stream)
{
    size_t        es, bytes;
    cudaError_t   e;

    es = type_size(type);

    if (c == NULL || es == 0 || (unsigned) op > ncclAvg
        || (kind == COLL_BROADCAST && (root < 0 || root >= c->n_ranks)))
    {
        report("%s: invalid communicator, type %d, op %d or root %d", call,
               (int) type, (int) op, root);
        return ncclInvalidArgument;
    }

    if (count > SIZE_MAX / es / (size_t) c->n_ranks) {
        report("%s: a count of %zu", call, count);
        return ncclInvalidArgument;
    }

    bytes = count * es;

    if (bytes == 0) {
        return group_error(c);
    }

    if (((kind != COLL_BROADCAST || c->rank == root)
         && !device_buffer(call, "sendbuff", send, bytes))
        || !device_buffer(call, "recvbuff", recv,
                          kind == COLL_ALL_GATHER
                          ? bytes * (size_t) c->n_ranks : bytes))
    {
        return ncclInvalidArgument;
    }

    if (group_error(c) != ncclSuccess) {
        return c->error;
    }

    /*
     * in a stream capture, recorded: each launch of the graph moves the
     * data then (a failure then is the group's, as NCCL's asynchronous
     * errors: the next call and ncclCommGetAsyncError() report it)
     */
    if (capturing(stream)) {
        e = enqueue(stream, [=]() {
            ncclResult_t  r;

            if (group_error(c) == ncclSuccess) {
                r = move(call, kind, send, recv, bytes, es, type, op, root,
                         c);
                if (r != ncclSuccess && c->error == ncclSuccess) {
                    c->error = r;
                }
            }
        });

        return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
    }

    /* stream-ordered: what was issued before has run */
    e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
        report("%s: the stream failed before: %s", call,
               cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }

    return move(call, kind, send, recv, bytes, es, type, op, root, c);
}


/* a collective's data, a chunk a round, between the ranks' slots */
static ncclResult_t
move(const char *call, coll_kind kind, const void *send, void *recv,
    size_t bytes, size_t es, ncclDataType_t type, ncclRedOp_t op, int root,
    ncclComm_t c)
{
    int           r;
    char         *set, *slots[NCCL_MAX_RANKS];
    size_t        at, n, per;
    ncclResult_t  rc;

    device_open  open;

    per = NCCL_CHUNK / es * es;

    for (at = 0; at < bytes; at += n) {
        n = bytes - at < per ? bytes - at : per;
        set = c->data + (size_t) (c->round++ & 1) * c->n_ranks * NCCL_CHUNK;

        for (r = 0; r < c->n_ranks; r++) {
            slots[r] = set + (size_t) r * NCCL_CHUNK;
        }

        if (kind != COLL_BROADCAST || c->rank == root) {
            memcpy(slots[c->rank], (const char *) send + at, n);
        }

        rc = barrier(c, call);
        if (rc != ncclSuccess) {
            return rc;
        }

        switch (kind) {
        case COLL_ALL_REDUCE:
            reduce((char *) recv + at, slots, c->n_ranks, n / es, type, op);
            break;

        case COLL_ALL_GATHER:
            for (r = 0; r < c->n_ranks; r++) {
                memcpy((char *) recv + (size_t) r * bytes + at, slots[r], n);
            }
            break;

        case COLL_BROADCAST:
            memcpy((char *) recv + at, slots[root], n);
            break;
        }
    }

    return ncclSuccess;
}


static bool
valid_id(const ncclUniqueId *id)
{
    return memchr(id->internal, '\0', sizeof(id->internal)) != NULL
           && strncmp(id->internal, NCCL_ID_PREFIX,
                      sizeof(NCCL_ID_PREFIX) - 1) == 0;
}


/* the segment: made by the first rank that comes, mapped by all */
static ncclResult_t
map_segment(ncclComm_t c)
{
    int          created;
    double       start;
    struct stat  st;

    c->size = NCCL_HDR_BYTES + 2 * (size_t) c->n_ranks * NCCL_CHUNK;

    c->fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    created = c->fd != -1;

    if (!created && errno == EEXIST) {
        c->fd = shm_open(c->name, O_RDWR, 0600);
    }

    if (c->fd == -1) {
        report("ncclCommInitRank: shm_open(%s): %s", c->name,
               strerror(errno));
        return ncclSystemError;
    }

    if (created && ftruncate(c->fd, (off_t) c->size) == -1) {
        report("ncclCommInitRank: ftruncate(%s, %zu): %s", c->name, c->size,
               strerror(errno));
        return ncclSystemError;
    }

    /* the creator may not have sized it yet */
    start = now();

    while (fstat(c->fd, &st) == 0 && (size_t) st.st_size < c->size) {
        if (now() - start > c->timeout) {
            report("ncclCommInitRank: %s stays %lld bytes, not %zu: a group "
                   "of another size?", c->name, (long long) st.st_size,
                   c->size);
            return ncclInvalidUsage;
        }

        usleep(1000);
    }

    c->hdr = (seg_hdr *) mmap(NULL, c->size, PROT_READ | PROT_WRITE,
                              MAP_SHARED, c->fd, 0);
    if (c->hdr == MAP_FAILED) {
        c->hdr = NULL;
        report("ncclCommInitRank: mmap(%s, %zu): %s", c->name, c->size,
               strerror(errno));
        return ncclSystemError;
    }

    c->data = (char *) c->hdr + NCCL_HDR_BYTES;

    if (created) {
        c->hdr->n_ranks = c->n_ranks;
        c->hdr->magic.store(NCCL_MAGIC, std::memory_order_release);
    }

    while (c->hdr->magic.load(std::memory_order_acquire) != NCCL_MAGIC) {
        if (now() - start > c->timeout) {
            report("ncclCommInitRank: %s was never set up", c->name);
            return ncclRemoteError;
        }

        usleep(1000);
    }

    if (c->hdr->n_ranks != c->n_ranks) {
        report("ncclCommInitRank: rank %d of %d, in a group of %d", c->rank,
               c->n_ranks, c->hdr->n_ranks);
        return ncclInvalidUsage;
    }

    if (lock_rank(c->fd, c->rank, F_OFD_SETLK, F_WRLCK) != 0) {
        report("ncclCommInitRank: rank %d of %d came twice (%s)", c->rank,
               c->n_ranks, strerror(errno));
        return ncclInvalidUsage;
    }

    return ncclSuccess;
}


static void
release(ncclComm_t c)
{
    if (c->hdr != NULL) {
        munmap(c->hdr, c->size);
    }

    if (c->fd != -1) {
        /* the rank's lock goes with its open file */
        close(c->fd);
        (void) shm_unlink(c->name);
    }

    delete c;
}

} /* namespace */


extern "C" {

const char *
ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a "
                                 "network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}


ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
    unsigned long long  rnd;

    memset(id, 0, sizeof(*id));

    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t) sizeof(rnd)) {
        report("ncclGetUniqueId: getrandom: %s", strerror(errno));
        return ncclSystemError;
    }

    snprintf(id->internal, sizeof(id->internal), NCCL_ID_PREFIX "%d-%016llx",
             (int) getpid(), rnd);

    return ncclSuccess;
}


/* waits for every rank of the group, CUDAEMU_NCCL_TIMEOUT at most */
ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int n_ranks, ncclUniqueId id, int rank)
{
    int           r, device;
    ncclComm_t    c;
    ncclResult_t  rc;
    uint32_t      j;

    *comm = NULL;

    if (cudaGetDevice(&device) != cudaSuccess) {
        return ncclUnhandledCudaError;
    }

    if (n_ranks < 1 || n_ranks > NCCL_MAX_RANKS || rank < 0
        || rank >= n_ranks || !valid_id(&id))
    {
        report("ncclCommInitRank: rank %d of %d (1 to %d ranks), or not an "
               "id of ncclGetUniqueId", rank, n_ranks, NCCL_MAX_RANKS);
        return ncclInvalidArgument;
    }

    c = new (std::nothrow) cudaemu_nccl_s();
    if (c == NULL) {
        return ncclSystemError;
    }

    c->rank = rank;
    c->n_ranks = n_ranks;
    c->fd = -1;
    c->timeout = timeout_s();
    memcpy(c->name, id.internal, sizeof(c->name));

    rc = map_segment(c);

    if (rc == ncclSuccess) {
        c->hdr->device[rank] = device;
        j = c->hdr->joined.fetch_add(1, std::memory_order_acq_rel) + 1;
        futex_wake(&c->hdr->joined);

        while (rc == ncclSuccess && j < (uint32_t) n_ranks) {
            rc = wait_while(c, &c->hdr->joined, j, "ncclCommInitRank");
            j = c->hdr->joined.load(std::memory_order_acquire);
        }
    }

    /* as NCCL, one device a rank: every rank finds the same pair */
    for (r = 0; rc == ncclSuccess && r < n_ranks; r++) {
        if (r != rank && c->hdr->device[r] == device) {
            report("ncclCommInitRank: rank %d and rank %d both on device %d",
                   r < rank ? r : rank, r < rank ? rank : r, device);
            rc = ncclInvalidUsage;
        }
    }

    if (rc != ncclSuccess) {
        release(c);
        return rc;
    }

    /* every rank has it open: the name is no longer needed */
    (void) shm_unlink(c->name);

    *comm = c;

    return ncclSuccess;
}


ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
    if (comm != NULL) {
        release(comm);
    }

    return ncclSuccess;
}


ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
    return ncclCommAbort(comm);
}


ncclResult_t
ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (comm == NULL) {
        return ncclInvalidArgument;
    }

    *async = group_error(comm);

    return ncclSuccess;
}


ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    return collective("ncclAllReduce", COLL_ALL_REDUCE, send, recv, count,
                      type, op, 0, comm, s);
}


ncclResult_t
ncclAllGather(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclComm_t comm, cudaStream_t s)
{
    return collective("ncclAllGather", COLL_ALL_GATHER, send, recv, count,
                      type, ncclSum, 0, comm, s);
}


ncclResult_t
ncclBroadcast(const void *send, void *recv, size_t count,
    ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t s)
{
    return collective("ncclBroadcast", COLL_BROADCAST, send, recv, count,
                      type, ncclSum, root, comm, s);
}

} /* extern "C" */
