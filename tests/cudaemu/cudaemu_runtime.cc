/*
 * The CUDA runtime API of the emulated device: device memory as mapped
 * regions of its own, registered so that every copy and every kernel
 * argument is checked against where its pointers live; pinned host
 * memory; streams that run their work in order as it is issued; events;
 * the device's properties; the error state, sticky after a kernel fails.
 */

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "cudaemu_int.h"


struct cudaemu_stream_s {
    unsigned  flags;
};

struct cudaemu_event_s {
    unsigned  flags;
};


namespace cudaemu {

#define DEVICE_BYTES  ((size_t) 16 << 30)

static std::mutex                     lock;
static std::map<uintptr_t, region>    regions;     /* by base */
static size_t                         device_used;
static cudaError_t                    last_error;
static cudaError_t                    sticky;
static int                            opened;


static void
protect_device(int prot)
{
    size_t  page, len;

    page = (size_t) sysconf(_SC_PAGESIZE);

    for (auto &it : regions) {
        if (it.second.kind == MEM_DEVICE) {
            len = (it.second.size + page - 1) / page * page;
            mprotect(it.second.base, len, prot);
        }
    }
}


device_open::device_open()
{
    std::lock_guard<std::mutex>  g(lock);

    if (opened++ == 0) {
        protect_device(PROT_READ | PROT_WRITE);
    }
}


device_open::~device_open()
{
    std::lock_guard<std::mutex>  g(lock);

    if (--opened == 0) {
        protect_device(PROT_NONE);
    }
}


/* names device memory that the host touched, then faults as it would */
static void
on_segv(int sig, siginfo_t *si, void *uc)
{
    static const char  msg[] = "cudaemu: the host touched device memory "
                               "(outside kernels and copies)\n";
    uintptr_t          a = (uintptr_t) si->si_addr;

    (void) uc;

    for (auto &it : regions) {
        if (it.second.kind == MEM_DEVICE && a >= it.first
            && a < it.first + it.second.size)
        {
            (void) !write(2, msg, sizeof(msg) - 1);
            break;
        }
    }

    signal(sig, SIG_DFL);
}


static void
catch_host_access()
{
    static bool       done;
    struct sigaction  sa;

    if (done) {
        return;
    }

    done = true;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
}


void
report(const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    fputs("cudaemu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}


cudaError_t
set_error(cudaError_t e, bool is_sticky)
{
    std::lock_guard<std::mutex>  g(lock);

    if (last_error == cudaSuccess) {
        last_error = e;
    }

    if (is_sticky && sticky == cudaSuccess) {
        sticky = e;
    }

    return e;
}


cudaError_t
sticky_error()
{
    return sticky;
}


static mem_kind
find_locked(const void *p, region *r)
{
    uintptr_t  a = (uintptr_t) p;

    auto  it = regions.upper_bound(a);

    if (it == regions.begin()) {
        return MEM_HOST;
    }

    --it;

    if (a >= it->first + it->second.size) {
        return MEM_HOST;
    }

    if (r != NULL) {
        *r = it->second;
    }

    return it->second.kind;
}


mem_kind
find(const void *p, region *r)
{
    std::lock_guard<std::mutex>  g(lock);

    return find_locked(p, r);
}


/* the name of argument index in "a, b + 1, (T *) c" */
static void
arg_name(const char *names, int index, char *buf, size_t size)
{
    int          depth, i;
    size_t       n;
    const char  *p, *start;

    depth = 0;
    i = 0;
    start = names;

    for (p = names; ; p++) {
        if (*p == '(' || *p == '[' || *p == '<') {
            depth++;
        } else if ((*p == ')' || *p == ']' || *p == '>') && depth > 0) {
            depth--;
        }

        if (*p == '\0' || (*p == ',' && depth == 0)) {
            if (i == index) {
                while (*start == ' ') {
                    start++;
                }
                n = (size_t) (p - start) < size - 1 ? (size_t) (p - start)
                                                    : size - 1;
                memcpy(buf, start, n);
                buf[n] = '\0';
                return;
            }

            if (*p == '\0') {
                break;
            }

            i++;
            start = p + 1;
        }
    }

    snprintf(buf, size, "#%d", index);
}


bool
check_pointer(const char *kernel, const char *names, int index,
    const void *p)
{
    char  name[128], why[256];

    if (p == NULL || find(p, NULL) != MEM_HOST) {
        return true;
    }

    arg_name(names, index, name, sizeof(name));
    snprintf(why, sizeof(why), "argument %d (%s) is %p, which is not device "
             "memory", index + 1, name, p);
    fail_launch(kernel, why);

    return false;
}


static cudaError_t
enter()
{
    return sticky;
}


static void *
map_region(size_t size, mem_kind kind)
{
    size_t  page, len;
    char   *p;

    page = (size_t) sysconf(_SC_PAGESIZE);
    len = (size + page - 1) / page * page;

    /* a guard page after each region */
    p = (char *) mmap(NULL, len + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }

    mprotect(p + len, page, PROT_NONE);

    std::lock_guard<std::mutex>  g(lock);

    if (kind == MEM_DEVICE) {
        catch_host_access();
        if (opened == 0) {
            mprotect(p, len, PROT_NONE);
        }
    }

    regions[(uintptr_t) p] = region{p, size, kind, false};
    if (kind == MEM_DEVICE) {
        device_used += len;
    }

    return p;
}


static cudaError_t
unmap_region(void *p, mem_kind kind)
{
    size_t  page, len;
    region  r;

    if (p == NULL) {
        return cudaSuccess;
    }

    {
        std::lock_guard<std::mutex>  g(lock);

        if (find_locked(p, &r) != kind || r.base != p || r.registered) {
            return cudaErrorInvalidValue;
        }

        regions.erase((uintptr_t) p);

        page = (size_t) sysconf(_SC_PAGESIZE);
        len = (r.size + page - 1) / page * page;

        if (kind == MEM_DEVICE) {
            device_used -= len;
        }
    }

    munmap(p, len + page);

    return cudaSuccess;
}


/* whether [p, p + size) lies in one region of kind (any of the two) */
static bool
within(const void *p, size_t size, mem_kind kind, mem_kind alt)
{
    region    r;
    mem_kind  k;

    k = find(p, &r);

    if (k == MEM_HOST) {
        return kind == MEM_HOST || alt == MEM_HOST;
    }

    if (k != kind && k != alt) {
        return false;
    }

    return size <= r.size - (size_t) ((const char *) p - r.base);
}


static cudaError_t
copy(void *dst, const void *src, size_t size, cudaMemcpyKind kind)
{
    bool  ok;

    if (size == 0) {
        return cudaSuccess;
    }

    switch (kind) {
    case cudaMemcpyHostToDevice:
        ok = within(src, size, MEM_HOST, MEM_PINNED)
             && within(dst, size, MEM_DEVICE, MEM_DEVICE)
             && find(src, NULL) != MEM_DEVICE;
        break;
    case cudaMemcpyDeviceToHost:
        ok = within(src, size, MEM_DEVICE, MEM_DEVICE)
             && within(dst, size, MEM_HOST, MEM_PINNED)
             && find(dst, NULL) != MEM_DEVICE;
        break;
    case cudaMemcpyDeviceToDevice:
        ok = within(src, size, MEM_DEVICE, MEM_DEVICE)
             && within(dst, size, MEM_DEVICE, MEM_DEVICE);
        break;
    case cudaMemcpyHostToHost:
        ok = find(src, NULL) != MEM_DEVICE && find(dst, NULL) != MEM_DEVICE;
        break;
    case cudaMemcpyDefault:
        ok = true;
        break;
    default:
        ok = false;
    }

    if (!ok) {
        report("cudaMemcpy of %zu bytes from %p to %p: kind %d does not "
               "match where the pointers live (or the copy overruns its "
               "allocation)", size, src, dst, (int) kind);
        return set_error(cudaErrorInvalidValue, false);
    }

    device_open  open;

    memmove(dst, src, size);

    return cudaSuccess;
}

/*
 * The devices: CUDAEMU_DEVICES of them (2 by default, so that a tensor-
 * parallel group has one a rank), all backed by the same memory; the
 * current one is the host thread's, as CUDA's is
 */
static thread_local int  current_device;


static int
device_count()
{
    static int  n;
    const char *s;

    if (n == 0) {
        s = getenv("CUDAEMU_DEVICES");
        n = s != NULL && atoi(s) > 0 ? atoi(s) : 2;
    }

    return n;
}


/* a stream or an event */
template <typename H>
static cudaError_t
create(H **h, unsigned flags)
{
    *h = (H *) calloc(1, sizeof(H));
    if (*h == NULL) {
        return set_error(cudaErrorMemoryAllocation, false);
    }

    (*h)->flags = flags;

    return enter();
}

} /* namespace cudaemu */


using namespace cudaemu;


extern "C" {

const char *
cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
        return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}


cudaError_t
cudaGetLastError(void)
{
    std::lock_guard<std::mutex>  g(lock);
    cudaError_t                  e;

    e = last_error;
    last_error = sticky;

    return e;
}


cudaError_t
cudaPeekAtLastError(void)
{
    return last_error;
}


cudaError_t
cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return enter();
}


cudaError_t
cudaSetDevice(int device)
{
    if (device < 0 || device >= device_count()) {
        return set_error(cudaErrorInvalidValue, false);
    }

    current_device = device;

    return enter();
}


cudaError_t
cudaGetDevice(int *device)
{
    *device = current_device;
    return enter();
}


cudaError_t
cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (device < 0 || device >= device_count()) {
        return set_error(cudaErrorInvalidValue, false);
    }

    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "cudaemu (emulated on the CPU)");
    prop->totalGlobalMem = DEVICE_BYTES;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->multiProcessorCount = 8;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->major = 9;
    prop->minor = 0;

    return enter();
}


cudaError_t
cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    std::lock_guard<std::mutex>  g(lock);

    *total_b = DEVICE_BYTES;
    *free_b = DEVICE_BYTES - device_used;

    return sticky;
}


cudaError_t
cudaDeviceSynchronize(void)
{
    return enter();
}


cudaError_t
cudaMalloc(void **p, size_t size)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    if (size > DEVICE_BYTES - device_used) {
        *p = NULL;
        return set_error(cudaErrorMemoryAllocation, false);
    }

    *p = map_region(size ? size : 1, MEM_DEVICE);

    return *p != NULL ? cudaSuccess
                      : set_error(cudaErrorMemoryAllocation, false);
}


cudaError_t
cudaFree(void *p)
{
    return unmap_region(p, MEM_DEVICE) == cudaSuccess
           ? enter() : set_error(cudaErrorInvalidValue, false);
}


cudaError_t
cudaHostAlloc(void **p, size_t size, unsigned flags)
{
    (void) flags;

    *p = map_region(size ? size : 1, MEM_PINNED);

    return *p != NULL ? enter()
                      : set_error(cudaErrorMemoryAllocation, false);
}


cudaError_t
cudaMallocHost(void **p, size_t size)
{
    return cudaHostAlloc(p, size, cudaHostAllocDefault);
}


cudaError_t
cudaFreeHost(void *p)
{
    return unmap_region(p, MEM_PINNED) == cudaSuccess
           ? enter() : set_error(cudaErrorInvalidValue, false);
}


/* pinned from now on, device-accessible at the same address */
cudaError_t
cudaHostRegister(void *p, size_t size, unsigned flags)
{
    char  *b = (char *) p;

    (void) flags;

    if (p == NULL || size == 0) {
        return set_error(cudaErrorInvalidValue, false);
    }

    std::lock_guard<std::mutex>  g(lock);

    if (find_locked(b, NULL) != MEM_HOST
        || find_locked(b + size - 1, NULL) != MEM_HOST)
    {
        last_error = cudaErrorInvalidValue;
        return cudaErrorInvalidValue;
    }

    regions[(uintptr_t) p] = region{b, size, MEM_PINNED, true};

    return sticky;
}


cudaError_t
cudaHostUnregister(void *p)
{
    region  r;

    std::lock_guard<std::mutex>  g(lock);

    if (find_locked(p, &r) != MEM_PINNED || r.base != p || !r.registered) {
        last_error = cudaErrorInvalidValue;
        return cudaErrorInvalidValue;
    }

    regions.erase((uintptr_t) p);

    return sticky;
}


cudaError_t
cudaMemcpy(void *dst, const void *src, size_t size, cudaMemcpyKind kind)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    return copy(dst, src, size, kind);
}


cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t size,
    cudaMemcpyKind kind, cudaStream_t s)
{
    (void) s;

    return cudaMemcpy(dst, src, size, kind);
}


cudaError_t
cudaMemset(void *p, int v, size_t size)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    if (size != 0 && !within(p, size, MEM_DEVICE, MEM_DEVICE)) {
        report("cudaMemset of %zu bytes at %p: not device memory", size, p);
        return set_error(cudaErrorInvalidValue, false);
    }

    device_open  open;

    memset(p, v, size);

    return cudaSuccess;
}


cudaError_t
cudaMemsetAsync(void *p, int v, size_t size, cudaStream_t s)
{
    (void) s;

    return cudaMemset(p, v, size);
}


cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return create(s, flags);
}


cudaError_t
cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}


cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return enter();
}


/* a stream's work ran as it was issued: waiting is checking */
cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
    (void) s;

    return enter();
}


cudaError_t
cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
    (void) s;
    (void) flags;

    return ev != NULL ? enter()
                      : set_error(cudaErrorInvalidResourceHandle, false);
}


cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    return create(ev, flags);
}


cudaError_t
cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}


cudaError_t
cudaEventDestroy(cudaEvent_t ev)
{
    free(ev);
    return enter();
}


cudaError_t
cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
    (void) s;

    return ev != NULL ? enter()
                      : set_error(cudaErrorInvalidResourceHandle, false);
}


cudaError_t
cudaEventSynchronize(cudaEvent_t ev)
{
    return ev != NULL ? enter()
                      : set_error(cudaErrorInvalidResourceHandle, false);
}


cudaError_t
cudaEventQuery(cudaEvent_t ev)
{
    return cudaEventSynchronize(ev);
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

    return enter();
}


int
cudaemu_is_device_pointer(const void *p)
{
    return find(p, NULL) == MEM_DEVICE;
}

} /* extern "C" */
