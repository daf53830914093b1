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
 *
 * Stream capture, as CUDA has it: between cudaStreamBeginCapture and
 * cudaStreamEndCapture the work issued to the stream (and to the streams
 * that fork from it by waiting for an event recorded in the capture) is
 * recorded into a graph, in the order issued, and not run; its arguments
 * are those of the call (a kernel's, a copy's pointers), and each
 * cudaGraphLaunch of the instantiated graph issues that work again to a
 * stream.  What CUDA refuses during capture is refused with its errors
 * and invalidates the capture, whose end then gives no graph: waiting
 * for or querying a capturing stream or an event recorded in a capture
 * (cudaErrorStreamCaptureUnsupported, cudaErrorCapturedEvent), work for
 * the legacy stream while a blocking stream captures
 * (cudaErrorStreamCaptureImplicit), a synchronous copy, memset,
 * allocation, free or device synchronize during a global capture, or
 * during a thread-local one of the same thread
 * (cudaErrorStreamCaptureUnsupported), a copy from or to pageable host
 * memory (the same), a wait for an event recorded outside the capture
 * (cudaErrorStreamCaptureIsolation), a fork not joined back by the end
 * (cudaErrorStreamCaptureUnjoined).
 */

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
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

struct capture {
    uint64_t                          id;
    cudaemu_stream_s                 *origin;
    cudaStreamCaptureMode             mode;
    pthread_t                         thread;
    bool                              invalid;
    std::vector<cudaemu::work>        nodes;
    std::vector<cudaemu_stream_s *>   forks;    /* joined it by an event */
};

} /* namespace */


struct cudaemu_stream_s {
    unsigned         flags;
    bool             destroyed;
    uint64_t         issued;
    uint64_t         done;
    std::deque<op>   q;
    capture         *cap;               /* capturing into, or NULL */
    size_t           cap_last;          /* nodes of cap up to its last */
    bool             cap_joined;        /* a fork: the origin waited */
};

struct cudaemu_event_s {
    unsigned           flags;
    cudaemu_stream_s  *stream;          /* of the last record, or NULL */
    uint64_t           seq;
    bool               opened;          /* another process's, by handle */
    uint64_t           cap_id;          /* recorded in that capture, or 0 */
    cudaemu_stream_s  *cap_stream;
    size_t             cap_pos;
};

struct cudaemu_graph_s {
    std::vector<cudaemu::work>  nodes;
};

struct cudaemu_gexec_s {
    std::vector<cudaemu::work>  nodes;
};


namespace cudaemu {

/* one lock for all streams: work runs under it, and may issue more */
static std::recursive_mutex              qlock;
static cudaemu_stream_s                  legacy;
/* created, in order; never freed (events may name them) */
static std::vector<cudaemu_stream_s *>  &streams =
    *new std::vector<cudaemu_stream_s *>();
/* the captures going on, and the ids given */
static std::vector<capture *>           &captures =
    *new std::vector<capture *>();
static uint64_t                          capture_ids;


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


static capture *
find_capture(uint64_t id)
{
    for (auto *c : captures) {
        if (c->id == id) {
            return c;
        }
    }

    return NULL;
}


/* the legacy stream would wait for a capturing blocking stream */
static cudaError_t
legacy_implicit()
{
    cudaError_t  e = cudaSuccess;

    for (auto *c : captures) {
        if (!(c->origin->flags & cudaStreamNonBlocking)) {
            c->invalid = true;
            e = cudaErrorStreamCaptureImplicit;
        }

        for (auto *f : c->forks) {
            if (!(f->flags & cudaStreamNonBlocking)) {
                c->invalid = true;
                e = cudaErrorStreamCaptureImplicit;
            }
        }
    }

    return e;
}


bool
capturing(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    return resolve(stream)->cap != NULL;
}


cudaError_t
capture_refuse(cudaStream_t stream, cudaError_t e)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s = resolve(stream);

    if (s->cap != NULL) {
        s->cap->invalid = true;
    }

    return set_error(e, false);
}


cudaError_t
capture_unsafe(bool any)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaError_t                            e = cudaSuccess;

    for (auto *c : captures) {
        if (any || c->mode == cudaStreamCaptureModeGlobal
            || (c->mode == cudaStreamCaptureModeThreadLocal
                && pthread_equal(c->thread, pthread_self())))
        {
            c->invalid = true;
            e = cudaErrorStreamCaptureUnsupported;
        }
    }

    return e == cudaSuccess ? e : set_error(e, false);
}


cudaError_t
enqueue(cudaStream_t stream, work fn)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s = resolve(stream);
    cudaError_t                            e;

    if (s->cap != NULL) {
        if (s->cap->invalid) {
            return set_error(cudaErrorStreamCaptureInvalidated, false);
        }

        /* recorded, not run: each launch of the graph runs it */
        s->cap->nodes.push_back(std::move(fn));
        s->cap_last = s->cap->nodes.size();
        s->cap_joined = false;

        return cudaSuccess;
    }

    if (s == &legacy) {
        e = legacy_implicit();
        if (e != cudaSuccess) {
            return set_error(e, false);
        }

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

    return cudaSuccess;
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

    if (s->cap != NULL) {
        return capture_refuse(s, cudaErrorStreamCaptureUnsupported);
    }

    run_until(s, s->issued);
    s->destroyed = true;

    return sticky_error();
}


/* what a wait for (or a query of) stream s meets in a capture */
static cudaError_t
capture_wait_check(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaError_t                            e;

    if (resolve(stream)->cap != NULL) {
        return capture_refuse(stream, cudaErrorStreamCaptureUnsupported);
    }

    if (resolve(stream) == &legacy) {
        e = legacy_implicit();
        if (e != cudaSuccess) {
            return set_error(e, false);
        }
    }

    return cudaSuccess;
}


cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
    cudaError_t  e;

    if (!stream_valid(s)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    e = capture_wait_check(s);
    if (e != cudaSuccess) {
        return e;
    }

    sync_stream(s);

    return sticky_error();
}


cudaError_t
cudaStreamQuery(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    cudaError_t                            e;

    if (!stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    e = capture_wait_check(stream);
    if (e != cudaSuccess) {
        return e;
    }

    return poll(resolve(stream), resolve(stream)->issued);
}


cudaError_t
cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned flags)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    cudaemu_stream_s                      *s;
    capture                               *c;

    (void) flags;

    if (ev == NULL || !stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    s = resolve(stream);
    c = ev->cap_id != 0 ? find_capture(ev->cap_id) : NULL;

    if (c != NULL) {
        /* an event of a capture: a dependency inside it */

        if (s->cap == c) {
            if (s == c->origin && ev->cap_stream != s
                && ev->cap_pos >= ev->cap_stream->cap_last)
            {
                ev->cap_stream->cap_joined = true;
            }

            return c->invalid
                   ? set_error(cudaErrorStreamCaptureInvalidated, false)
                   : sticky_error();
        }

        if (s->cap != NULL || s == &legacy) {
            c->invalid = true;
            return capture_refuse(s, s == &legacy
                                     ? cudaErrorStreamCaptureImplicit
                                     : cudaErrorStreamCaptureIsolation);
        }

        /* a fork: s captures into c from here, until c ends */
        s->cap = c;
        s->cap_last = ev->cap_pos;
        s->cap_joined = false;
        c->forks.push_back(s);

        return c->invalid ? set_error(cudaErrorStreamCaptureInvalidated,
                                      false)
                          : sticky_error();
    }

    if (s->cap != NULL) {
        /* work outside the capture: a graph cannot wait for it */
        if (ev->stream != NULL) {
            return capture_refuse(s, cudaErrorStreamCaptureIsolation);
        }

        return sticky_error();
    }

    if (ev->stream != NULL && ev->stream->done < ev->seq) {
        push(s, work(), ev->stream, ev->seq);
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
    cudaError_t                            e;

    if (ev == NULL || !stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    s = resolve(stream);

    if (s->cap != NULL) {
        if (s->cap->invalid) {
            return set_error(cudaErrorStreamCaptureInvalidated, false);
        }

        /* a point in the capture, for a wait in it to depend on */
        ev->stream = NULL;
        ev->cap_id = s->cap->id;
        ev->cap_stream = s;
        ev->cap_pos = s->cap_last;

        return sticky_error();
    }

    ev->cap_id = 0;

    /* the legacy stream's record waits for the blocking streams too */
    if (s == &legacy) {
        e = enqueue(NULL, [] {});
        if (e != cudaSuccess) {
            return e;
        }
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


/* ev was last recorded in a capture going on: nothing to wait for */
static bool
captured_event(cudaEvent_t ev)
{
    capture  *c;

    c = ev->cap_id != 0 ? find_capture(ev->cap_id) : NULL;

    if (c != NULL) {
        c->invalid = true;
    }

    return c != NULL;
}


cudaError_t
cudaEventSynchronize(cudaEvent_t ev)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);

    if (ev == NULL) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (captured_event(ev)) {
        return set_error(cudaErrorCapturedEvent, false);
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

    if (captured_event(ev)) {
        return set_error(cudaErrorCapturedEvent, false);
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
    if (capture_unsafe(true) != cudaSuccess) {
        return cudaErrorStreamCaptureUnsupported;
    }

    sync_all();

    return sticky_error();
}

cudaError_t
cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    capture                               *c;

    if (!stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (stream == NULL) {
        return set_error(cudaErrorStreamCaptureUnsupported, false);
    }

    if (mode != cudaStreamCaptureModeGlobal
        && mode != cudaStreamCaptureModeThreadLocal
        && mode != cudaStreamCaptureModeRelaxed)
    {
        return set_error(cudaErrorInvalidValue, false);
    }

    if (stream->cap != NULL) {
        return set_error(cudaErrorIllegalState, false);
    }

    c = new capture();
    c->id = ++capture_ids;
    c->origin = stream;
    c->mode = mode;
    c->thread = pthread_self();
    c->invalid = false;

    stream->cap = c;
    stream->cap_last = 0;
    captures.push_back(c);

    return sticky_error();
}


/* the capture that s began ends: a graph of its work, or an error */
cudaError_t
cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    capture                               *c;
    cudaError_t                            e;
    size_t                                 i;

    if (graph == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    *graph = NULL;

    if (!stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    c = resolve(stream)->cap;

    if (c == NULL) {
        return set_error(cudaErrorIllegalState, false);
    }

    if (c->origin != stream) {
        c->invalid = true;
        return set_error(cudaErrorStreamCaptureUnmatched, false);
    }

    if (c->mode != cudaStreamCaptureModeRelaxed
        && !pthread_equal(c->thread, pthread_self()))
    {
        return set_error(cudaErrorStreamCaptureWrongThread, false);
    }

    e = c->invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;

    for (auto *f : c->forks) {
        if (!f->cap_joined && e == cudaSuccess) {
            e = cudaErrorStreamCaptureUnjoined;
        }

        f->cap = NULL;
    }

    stream->cap = NULL;

    for (i = 0; i < captures.size(); i++) {
        if (captures[i] == c) {
            captures.erase(captures.begin() + i);
            break;
        }
    }

    if (e == cudaSuccess) {
        *graph = new cudaemu_graph_s();
        (*graph)->nodes = std::move(c->nodes);
    }

    delete c;

    return e == cudaSuccess ? sticky_error() : set_error(e, false);
}


cudaError_t
cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaemu_stream_s                      *s;
    cudaError_t                            e;

    if (!stream_valid(stream) || status == NULL) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    s = resolve(stream);

    if (s == &legacy) {
        e = legacy_implicit();
        if (e != cudaSuccess) {
            return set_error(e, false);
        }
    }

    *status = s->cap == NULL ? cudaStreamCaptureStatusNone
              : s->cap->invalid ? cudaStreamCaptureStatusInvalidated
              : cudaStreamCaptureStatusActive;

    return sticky_error();
}


/* nodes NULL: *n = how many; else the first *n of them */
cudaError_t
cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *n)
{
    size_t  i;

    if (graph == NULL || n == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    if (nodes == NULL) {
        *n = graph->nodes.size();
        return sticky_error();
    }

    for (i = 0; i < *n; i++) {
        nodes[i] = i < graph->nodes.size()
                   ? (cudaGraphNode_t) &graph->nodes[i] : NULL;
    }

    *n = std::min(*n, graph->nodes.size());

    return sticky_error();
}


/* the work as captured: the graph may be changed or destroyed after */
cudaError_t
cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
    unsigned long long flags)
{
    (void) flags;

    if (exec == NULL || graph == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    *exec = new cudaemu_gexec_s();
    (*exec)->nodes = graph->nodes;

    return sticky_error();
}


/* the graph's work issued to s, in its order, run as s's is */
cudaError_t
cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex>  g(qlock);
    cudaError_t                            e;

    if (exec == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    if (!stream_valid(stream)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (sticky_error() != cudaSuccess) {
        return sticky_error();
    }

    for (const auto &fn : exec->nodes) {
        e = enqueue(stream, fn);
        if (e != cudaSuccess) {
            return e;
        }
    }

    return sticky_error();
}


cudaError_t
cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (exec == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    /* work already launched holds its own copies */
    delete exec;

    return sticky_error();
}


cudaError_t
cudaGraphDestroy(cudaGraph_t graph)
{
    if (graph == NULL) {
        return set_error(cudaErrorInvalidValue, false);
    }

    delete graph;

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
