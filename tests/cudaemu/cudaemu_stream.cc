/*
 * Streams and events of the emulated CUDA device, as lazy as CUDA allows:
 * the work issued to a stream (kernels, asynchronous copies and memsets,
 * cuBLAS calls) runs only when something waits for it (a synchronize of
 * the stream, of an event recorded after it, or of the device; a
 * synchronous copy; cudaFree), in the stream's order, and then only the
 * waited-for stream runs, with the work of other streams that it waits
 * for by cudaStreamWaitEvent.  Work on two streams with no event between
 * them is therefore never put in the order the program hoped for: the
 * stream synchronized first runs first, whatever was issued before it
 * elsewhere, and the host reading pinned memory that an asynchronous copy
 * has not yet been waited for finds it unwritten.
 *
 * The legacy default stream (0) waits for the work issued before it to
 * every blocking stream, and a blocking stream's work waits for the
 * legacy stream's earlier work, as in CUDA; non-blocking streams wait for
 * nothing but events.  After a sticky error (a kernel that faulted) the
 * work still queued is dropped, as a GPU's context is lost.
 *
 * An inter-process event (cudaEventInterprocess) completes as it is
 * recorded: the stream's work up to it runs then, since another process
 * that waits for it cannot make this one's streams run; so an event
 * opened from another process's handle has always completed.
 */

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <vector>

#include "cudaemu_int.h"


namespace {

struct op {
    uint64_t                 seq;
    cudaemu::work            fn;        /* empty: a wait */
    cudaemu_stream_s        *wait_on;
    uint64_t                 wait_seq;
};

} /* namespace */


struct cudaemu_stream_s {
    unsigned         flags;
    bool             destroyed;
    uint64_t         issued;
    uint64_t         done;
    std::deque<op>   q;
};

struct cudaemu_event_s {
    unsigned           flags;
    cudaemu_stream_s  *stream;          /* of the last record, or NULL */
    uint64_t           seq;
    bool               opened;          /* another process's, by handle */
};


namespace cudaemu {

/* one lock for all streams: work runs under it, and may issue more */
static std::recursive_mutex              qlock;
static cudaemu_stream_s                  legacy;
/* created, in order; never freed (events may name them) */
static std::vector<cudaemu_stream_s *>  &streams =
    *new std::vector<cudaemu_stream_s *>();


static cudaemu_stream_s *
resolve(cudaStream_t s)
{
    return s != NULL ? s : &legacy;
}


static void
push(cudaemu_stream_s *s, work fn, cudaemu_stream_s *wait_on,
    uint64_t wait_seq)
{
    op  o;

    o.seq = ++s->issued;
    o.fn = std::move(fn);
    o.wait_on = wait_on;
    o.wait_seq = wait_seq;

    s->q.push_back(std::move(o));
}


/* runs s's work up to and including seq */
static void
run_until(cudaemu_stream_s *s, uint64_t seq)
{
    op  o;

    while (s->done < seq && !s->q.empty()) {
        o = std::move(s->q.front());
        s->q.pop_front();

        if (o.fn) {
            if (sticky_error() == cudaSuccess) {
                o.fn();
            }

        } else {
            run_until(o.wait_on, o.wait_seq);
        }

        s->done = o.seq;
    }
}


/* not ready while work is queued; asking lets it go on, as a GPU would */
static cudaError_t
poll(cudaemu_stream_s *s, uint64_t seq)
{
    if (s == NULL || s->done >= seq) {
        return sticky_error();
    }

    run_until(s, seq);

    return sticky_error() != cudaSuccess ? sticky_error() : cudaErrorNotReady;
}


void
enqueue(cudaStream_t stream, work fn)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s = resolve(stream);

    if (s == &legacy) {
        for (auto *b : streams) {
            if (!(b->flags & cudaStreamNonBlocking) && b->done < b->issued) {
                push(s, work(), b, b->issued);
            }
        }

    } else if (!(s->flags & cudaStreamNonBlocking)
               && legacy.done < legacy.issued)
    {
        push(s, work(), &legacy, legacy.issued);
    }

    push(s, std::move(fn), NULL, 0);
}


void
sync_stream(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s = resolve(stream);

    run_until(s, s->issued);
}


/* the newest stream's work first: no order that the program did not ask for */
void
sync_all()
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    size_t                                 i;

    for (i = streams.size(); i > 0; i--) {
        run_until(streams[i - 1], streams[i - 1]->issued);
    }

    run_until(&legacy, legacy.issued);
}


bool
stream_valid(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (stream == NULL) {
        return true;
    }

    for (auto *s : streams) {
        if (s == stream) {
            return !s->destroyed;
        }
    }

    return false;
}

} /* namespace cudaemu */


using namespace cudaemu;


extern "C" {

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    *s = new cudaemu_stream_s();
    (*s)->flags = flags;
    streams.push_back(*s);

    return sticky_error();
}


cudaError_t
cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}


/* its work still runs (now: nobody can wait for it any more) */
cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (s == NULL || !stream_valid(s)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    run_until(s, s->issued);
    s->destroyed = true;

    return sticky_error();
}


cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
    if (!stream_valid(s)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    sync_stream(s);

    return sticky_error();
}


cudaError_t
cudaStreamQuery(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (!stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    return poll(resolve(stream), resolve(stream)->issued);
}


cudaError_t
cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned flags)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    (void) flags;

    if (ev == NULL || !stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (ev->stream != NULL && ev->stream->done < ev->seq) {
        push(resolve(stream), work(), ev->stream, ev->seq);
    }

    return sticky_error();
}


cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    *ev = new cudaemu_event_s();
    (*ev)->flags = flags;

    return sticky_error();
}


cudaError_t
cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}


cudaError_t
cudaEventDestroy(cudaEvent_t ev)
{
    if (ev == NULL) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    delete ev;

    return sticky_error();
}


/* the event completes when the work issued to s so far has run */
cudaError_t
cudaEventRecord(cudaEvent_t ev, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s;

    if (ev == NULL || !stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    s = resolve(stream);

    /* the legacy stream's record waits for the blocking streams too */
    if (s == &legacy) {
        enqueue(NULL, [] {});
    }

    if (ev->opened) {
        run_until(s, s->issued);
        return sticky_error();
    }

    ev->stream = s;
    ev->seq = s->issued;

    if (ev->flags & cudaEventInterprocess) {
        run_until(s, s->issued);
    }

    return sticky_error();
}


cudaError_t
cudaEventSynchronize(cudaEvent_t ev)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (ev == NULL) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (ev->stream != NULL) {
        run_until(ev->stream, ev->seq);
    }

    return sticky_error();
}


cudaError_t
cudaEventQuery(cudaEvent_t ev)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (ev == NULL) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    return poll(ev->stream, ev->seq);
}


cudaError_t
cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (a == NULL || b == NULL
        || (a->flags & cudaEventDisableTiming)
        || (b->flags & cudaEventDisableTiming))
    {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    *ms = 0.0f;

    return sticky_error();
}


cudaError_t
cudaDeviceSynchronize(void)
{
    sync_all();

    return sticky_error();
}

typedef struct {
    uint32_t  magic;
    int32_t   pid;
} ipc_event_t;

#define IPC_EVENT_MAGIC  0x45504943     /* "CIPE" */


cudaError_t
cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t ev)
{
    ipc_event_t  e;

    if (ev == NULL || ev->opened
        || (ev->flags & (cudaEventInterprocess | cudaEventDisableTiming))
           != (cudaEventInterprocess | cudaEventDisableTiming))
    {
        report("cudaIpcGetEventHandle: the event was not created with "
               "cudaEventInterprocess | cudaEventDisableTiming");
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    e.magic = IPC_EVENT_MAGIC;
    e.pid = (int32_t) getpid();

    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &e, sizeof(e));

    return sticky_error();
}


cudaError_t
cudaIpcOpenEventHandle(cudaEvent_t *ev, cudaIpcEventHandle_t h)
{
    ipc_event_t  e;

    memcpy(&e, h.reserved, sizeof(e));
    *ev = NULL;

    if (e.magic != IPC_EVENT_MAGIC || e.pid == (int32_t) getpid()
        || kill(e.pid, 0) != 0)
    {
        report("cudaIpcOpenEventHandle: not an event handle of a live "
               "process beside this one");
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    *ev = new cudaemu_event_s();
    (*ev)->flags = cudaEventInterprocess | cudaEventDisableTiming;
    (*ev)->opened = true;

    return sticky_error();
}

} /* extern "C" */
