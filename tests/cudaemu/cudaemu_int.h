/*
 * What the parts of the emulated CUDA device share: the registry of
 * device and pinned host memory, and the error state.
 */

#ifndef CUDAEMU_INT_H
#define CUDAEMU_INT_H

#include <stddef.h>

#include <functional>

#include "cuda_runtime.h"


namespace cudaemu {

enum mem_kind {
    MEM_HOST = 0,               /* not the emulator's */
    MEM_DEVICE,
    MEM_PINNED
};

struct region {
    char     *base;
    size_t    size;
    mem_kind  kind;
    bool      registered;       /* host memory of its owner's, pinned */
    char     *map;              /* the pages it lies in, between guards */
    size_t    map_len;
    int       fd;               /* device memory's memfd, for IPC; or -1 */
    bool      ipc;              /* another process's, opened by handle */
};

/* where p lies; MEM_HOST (and r untouched) when in no region */
mem_kind find(const void *p, region *r);

/* e for cudaGetLastError; a sticky e is returned by every later call */
cudaError_t set_error(cudaError_t e, bool sticky);
cudaError_t sticky_error();

/*
 * device memory is PROT_NONE but within kernels, copies and cuBLAS: the
 * host touching it faults, as it would on a GPU; open while alive
 */
struct device_open {
    device_open();
    ~device_open();
};

/* the kernel this thread runs now, for the fault handler to name */
extern thread_local const char  *kernel_running;

/*
 * from the fault handler, on the faulting thread's fiber: reports where,
 * fails the launch with a sticky illegal address and leaves the fiber
 */
[[noreturn]] void kernel_fault(const void *addr);

void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * CUDAEMU_PROFILE=prefix: the CPU time each kernel (and cuBLAS call) took,
 * written at exit to prefix.<pid>; profile_start() is 0 when it is unset
 */
double profile_start();
void profile_stop(const char *name, double start);

/* work for a stream (NULL: the legacy one), run when it is waited for */
typedef std::function<void()>  work;

/*
 * fn issued to s, or recorded into the graph that s is capturing; an
 * error (set, not sticky) where CUDA refuses it: work for the legacy
 * stream while a blocking stream captures, for an invalidated capture
 */
cudaError_t enqueue(cudaStream_t s, work fn);
void sync_stream(cudaStream_t s);
void sync_all();
bool stream_valid(cudaStream_t s);

/* whether s is capturing into a graph */
bool capturing(cudaStream_t s);

/* e for a call that s's capture refuses: the capture is invalidated */
cudaError_t capture_refuse(cudaStream_t s, cudaError_t e);

/*
 * cudaStreamCaptureUnsupported (and the captures invalidated) for a
 * call that CUDA prohibits during capture (a synchronous copy, memset,
 * an allocation, a device-wide synchronize): any capture in global mode,
 * this thread's in thread-local mode; cudaSuccess otherwise
 */
cudaError_t capture_unsafe(bool any);

} /* namespace cudaemu */

#endif /* CUDAEMU_INT_H */
