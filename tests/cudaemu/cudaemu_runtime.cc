/*
 * The CUDA runtime API of the emulated device: device memory as mapped
 * regions of its own, registered so that every copy and every kernel
 * argument is checked against where its pointers live; pinned host
 * memory; copies and memsets issued to the streams of cudaemu_stream.cc;
 * the device's properties; the error state, sticky after a kernel fails.
 */

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cudaemu_int.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(p, n)    ((void) (p), (void) (n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n)  ((void) (p), (void) (n))
#endif


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
    for (auto &it : regions) {
        if (it.second.kind == MEM_DEVICE) {
            mprotect(it.second.map, it.second.map_len, prot);
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

    /* a GPU ends the kernel with an illegal address: so does the launch */
    if (kernel_running != NULL) {
        kernel_fault(si->si_addr);      /* does not return */
    }

    for (auto &it : regions) {
        if (it.second.kind == MEM_DEVICE
            && a >= (uintptr_t) it.second.map
            && a < (uintptr_t) it.second.map + it.second.map_len)
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
    struct sigaction  sa;

    /* again where something put another handler in its place */
    if (sigaction(SIGSEGV, NULL, &sa) == 0 && (sa.sa_flags & SA_SIGINFO)
        && sa.sa_sigaction == on_segv)
    {
        return;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
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


/*
 * a region between two guard pages, its end at the 256-byte boundary
 * (CUDA's alignment) next to the guard after it, so that a kernel's read
 * or write past its end faults; under ASan the bytes between its end and
 * that boundary, and those before it, are poisoned, so that every byte
 * out of bounds is reported
 */
static void *
map_region_fd(size_t size, mem_kind kind, int fd, bool ipc)
{
    size_t  page, len, room;
    char   *m, *p;

    page = (size_t) sysconf(_SC_PAGESIZE);
    len = (size + page - 1) / page * page;
    room = (size + 255) / 256 * 256;

    /* device memory is a memfd of its own, that a handle can share */
    if (kind == MEM_DEVICE && fd < 0) {
        fd = memfd_create("cudaemu-device", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t) len) != 0) {
            if (fd >= 0) {
                close(fd);
            }
            return NULL;
        }
    }

    m = (char *) mmap(NULL, len + 2 * page, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED
        || (fd < 0 && mprotect(m + page, len, PROT_READ | PROT_WRITE) != 0)
        || (fd >= 0 && mmap(m + page, len, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED))
    {
        if (m != MAP_FAILED) {
            munmap(m, len + 2 * page);
        }
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }

    if (ipc) {
        close(fd);
        fd = -1;
    }

    p = m + page + len - room;

    ASAN_POISON_MEMORY_REGION(m + page, (size_t) (p - (m + page)));
    ASAN_POISON_MEMORY_REGION(p + size, room - size);

    std::lock_guard<std::mutex>  g(lock);

    if (kind == MEM_DEVICE) {
        catch_host_access();
        if (opened == 0) {
            mprotect(m + page, len, PROT_NONE);
        }
    }

    regions[(uintptr_t) p] = region{p, size, kind, false, m + page, len, fd,
                                    ipc};
    if (kind == MEM_DEVICE && !ipc) {
        device_used += len;
    }

    return p;
}


static void *
map_region(size_t size, mem_kind kind)
{
    return map_region_fd(size, kind, -1, false);
}


static cudaError_t
unmap_region(void *p, mem_kind kind, bool ipc = false)
{
    size_t  page, len;
    region  r;

    if (p == NULL) {
        return cudaSuccess;
    }

    {
        std::lock_guard<std::mutex>  g(lock);

        if (find_locked(p, &r) != kind || r.base != p || r.registered
            || r.ipc != ipc)
        {
            return cudaErrorInvalidValue;
        }

        regions.erase((uintptr_t) p);

        page = (size_t) sysconf(_SC_PAGESIZE);
        len = r.map_len;

        if (kind == MEM_DEVICE && !ipc) {
            device_used -= len;
        }
    }

    ASAN_UNPOISON_MEMORY_REGION(r.map, len);
    munmap(r.map - page, len + 2 * page);

    if (r.fd >= 0) {
        close(r.fd);
    }

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


/*
 * a copy issued to stream s (NULL: the legacy stream), checked now; as in
 * CUDA, a copy from pageable host memory reads it before the call
 * returns, and one to pageable host memory is done when the call returns;
 * pinned memory is read and written when the stream gets there
 */
static cudaError_t
copy(void *dst, const void *src, size_t size, cudaMemcpyKind kind,
    cudaStream_t s, bool sync)
{
    bool         ok;
    mem_kind     sk, dk;
    cudaError_t  e;

    if (size == 0) {
        return cudaSuccess;
    }

    if (!stream_valid(s)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
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
        ok = within(src, size, find(src, NULL), find(src, NULL))
             && within(dst, size, find(dst, NULL), find(dst, NULL));
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

    sk = find(src, NULL);
    dk = find(dst, NULL);

    /* a graph holds no copy of pageable memory, nor waits for one */
    if ((sk == MEM_HOST || dk == MEM_HOST) && capturing(s)) {
        report("cudaMemcpyAsync of %zu bytes from %p to %p: pageable host "
               "memory in a stream capture", size, src, dst);
        return capture_refuse(s, cudaErrorStreamCaptureUnsupported);
    }

    if (sk == MEM_HOST) {
        /* staged now: the caller may reuse its buffer at once */
        auto  staged = std::make_shared<std::vector<char>>(
                           (const char *) src, (const char *) src + size);

        e = enqueue(s, [dst, staged] {
                device_open  open;

                memcpy(dst, staged->data(), staged->size());
            });

    } else {
        e = enqueue(s, [dst, src, size] {
                device_open  open;

                memmove(dst, src, size);
            });
    }

    if (e != cudaSuccess) {
        return e;
    }

    if (sync || dk == MEM_HOST) {
        sync_stream(s);
    }

    return sticky_error();
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
    case cudaErrorIllegalState: return "the operation cannot be performed "
                                       "in the present state";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched:
        return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined:
        return "the capture sequence contains a fork that was not joined "
               "to the primary stream";
    case cudaErrorStreamCaptureIsolation:
        return "a dependency would have been created which crosses the "
               "capture sequence boundary";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a "
               "capturing blocking stream";
    case cudaErrorCapturedEvent:
        return "operation not permitted on an event last recorded in a "
               "capturing stream";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from "
               "another thread";
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
cudaMalloc(void **p, size_t size)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    if (capture_unsafe(false) != cudaSuccess) {
        *p = NULL;
        return cudaErrorStreamCaptureUnsupported;
    }

    if (size > DEVICE_BYTES - device_used) {
        *p = NULL;
        return set_error(cudaErrorMemoryAllocation, false);
    }

    *p = map_region(size ? size : 1, MEM_DEVICE);

    return *p != NULL ? cudaSuccess
                      : set_error(cudaErrorMemoryAllocation, false);
}


/* waits for the device first, as CUDA's does */
cudaError_t
cudaFree(void *p)
{
    if (capture_unsafe(false) != cudaSuccess) {
        return cudaErrorStreamCaptureUnsupported;
    }

    sync_all();

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
    sync_all();

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

    regions[(uintptr_t) p] = region{b, size, MEM_PINNED, true, b, size, -1,
                                    false};

    return sticky;
}


cudaError_t
cudaHostUnregister(void *p)
{
    region  r;

    sync_all();

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

    if (capture_unsafe(false) != cudaSuccess) {
        return cudaErrorStreamCaptureUnsupported;
    }

    return copy(dst, src, size, kind, NULL, true);
}


cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t size,
    cudaMemcpyKind kind, cudaStream_t s)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    return copy(dst, src, size, kind, s, false);
}


/* asynchronous to the host for device memory, cudaMemset too */
cudaError_t
cudaMemsetAsync(void *p, int v, size_t size, cudaStream_t s)
{
    if (enter() != cudaSuccess) {
        return enter();
    }

    if (!stream_valid(s)) {
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (size != 0 && !within(p, size, MEM_DEVICE, MEM_DEVICE)) {
        report("cudaMemset of %zu bytes at %p: not device memory", size, p);
        return set_error(cudaErrorInvalidValue, false);
    }

    return enqueue(s, [p, v, size] {
               device_open  open;

               memset(p, v, size);
           });
}


cudaError_t
cudaMemset(void *p, int v, size_t size)
{
    if (capture_unsafe(false) != cudaSuccess) {
        return cudaErrorStreamCaptureUnsupported;
    }

    return cudaMemsetAsync(p, v, size, NULL);
}


/*
 * IPC: a handle names the memfd of the allocation that p lies in (the
 * exporting process's pid and descriptor, the allocation's size), which
 * another process of the same user maps through /proc; the opened
 * mapping is device memory there, until cudaIpcCloseMemHandle
 */
typedef struct {
    uint32_t  magic;
    int32_t   pid;
    int32_t   fd;
    uint64_t  size;
} ipc_mem_t;

#define IPC_MEM_MAGIC  0x4d504943       /* "CIPM" */


cudaError_t
cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    region     r;
    ipc_mem_t  m;

    if (enter() != cudaSuccess) {
        return enter();
    }

    if (find(p, &r) != MEM_DEVICE || r.ipc || r.fd < 0) {
        report("cudaIpcGetMemHandle: %p is not device memory of this "
               "process's", p);
        return set_error(cudaErrorInvalidValue, false);
    }

    m.magic = IPC_MEM_MAGIC;
    m.pid = (int32_t) getpid();
    m.fd = r.fd;
    m.size = r.size;

    static_assert(sizeof(m) <= sizeof(h->reserved), "the IPC handle");
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &m, sizeof(m));

    return cudaSuccess;
}


cudaError_t
cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned flags)
{
    int        fd;
    char       path[64];
    ipc_mem_t  m;

    (void) flags;

    if (enter() != cudaSuccess) {
        return enter();
    }

    memcpy(&m, h.reserved, sizeof(m));
    *p = NULL;

    if (m.magic != IPC_MEM_MAGIC) {
        report("cudaIpcOpenMemHandle: not a memory handle");
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    if (m.pid == (int32_t) getpid()) {
        report("cudaIpcOpenMemHandle: the handle is this process's own "
               "memory (CUDA refuses it)");
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int) m.pid, (int) m.fd);

    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        report("cudaIpcOpenMemHandle: the memory of process %d is gone",
               (int) m.pid);
        return set_error(cudaErrorInvalidResourceHandle, false);
    }

    *p = map_region_fd((size_t) m.size, MEM_DEVICE, fd, true);

    return *p != NULL ? cudaSuccess
                      : set_error(cudaErrorMemoryAllocation, false);
}


cudaError_t
cudaIpcCloseMemHandle(void *p)
{
    sync_all();

    if (unmap_region(p, MEM_DEVICE, true) != cudaSuccess) {
        report("cudaIpcCloseMemHandle: %p was not opened by a handle", p);
        return set_error(cudaErrorInvalidValue, false);
    }

    return enter();
}


int
cudaemu_is_device_pointer(const void *p)
{
    return find(p, NULL) == MEM_DEVICE;
}

} /* extern "C" */
