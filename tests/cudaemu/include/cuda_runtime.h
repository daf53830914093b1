/*
 * The emulated CUDA device: the runtime API that the CUDA backend and its
 * tests call, run on the CPU.  Device memory is mapped regions of its own
 * (registered, so that copies and kernel arguments are checked against
 * where their pointers live); streams run their work only when it is
 * waited for (cudaemu_stream.cc); a kernel runs each block's threads as
 * fibers (cudaemu.h).
 * C code sees the host API only; C++ code (the kernels) also gets the
 * device side: the index variables, shared memory, warp and block
 * synchronisation, and the launch.
 */

#ifndef CUDAEMU_CUDA_RUNTIME_H
#define CUDAEMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#define CUDAEMU         1
#define CUDART_VERSION  13000     /* the API it follows */

#ifdef __cplusplus
extern "C" {
#endif


typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14
} cudaDataType;

typedef cudaDataType  cudaDataType_t;

typedef struct {
    char  reserved[64];
} cudaIpcMemHandle_t;

typedef struct {
    char  reserved[64];
} cudaIpcEventHandle_t;

#define cudaIpcMemLazyEnablePeerAccess  0x01

typedef struct cudaemu_stream_s  *cudaStream_t;
typedef struct cudaemu_event_s   *cudaEvent_t;
typedef struct cudaemu_graph_s   *cudaGraph_t;
typedef struct cudaemu_gexec_s   *cudaGraphExec_t;
typedef struct cudaemu_gnode_s   *cudaGraphNode_t;

typedef enum {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;

typedef enum {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
} cudaStreamCaptureStatus;

typedef struct cudaDeviceProp {
    char    name[256];
    size_t  totalGlobalMem;
    size_t  sharedMemPerBlock;
    int     multiProcessorCount;
    int     warpSize;
    int     maxThreadsPerBlock;
    int     major;
    int     minor;
} cudaDeviceProp;

#define cudaStreamDefault            0x00
#define cudaStreamNonBlocking        0x01
#define cudaEventDefault             0x00
#define cudaEventBlockingSync        0x01
#define cudaEventDisableTiming       0x02
#define cudaEventInterprocess        0x04
#define cudaHostAllocDefault         0x00
#define cudaHostAllocPortable        0x01
#define cudaHostRegisterDefault      0x00
#define cudaHostRegisterPortable     0x01
#define cudaHostRegisterMapped       0x02


const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t size);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostRegister(void *p, size_t size, unsigned flags);
cudaError_t cudaHostUnregister(void *p);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t size,
    cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t size,
    cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t size);
cudaError_t cudaMemsetAsync(void *p, int v, size_t size, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev,
    unsigned flags);

/*
 * stream capture and graphs (cudaemu_stream.cc): what is issued to a
 * capturing stream is recorded, not run, and runs at each cudaGraphLaunch
 */
cudaError_t cudaStreamBeginCapture(cudaStream_t s,
    cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s,
    cudaStreamCaptureStatus *status);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
    size_t *n);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
    unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p);
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h,
    unsigned flags);
cudaError_t cudaIpcCloseMemHandle(void *p);
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t ev);
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *ev, cudaIpcEventHandle_t h);

/* the emulator's own: whether p lies in device memory (for the tests) */
int cudaemu_is_device_pointer(const void *p);
/*
 * the emulator's own: the kernel launches taken so far, eager or into a
 * stream's capture (a graph's replays not counted)
 */
unsigned long cudaemu_kernel_launches(void);


#ifdef __cplusplus
}

#include "cudaemu.h"

#endif

#endif /* CUDAEMU_CUDA_RUNTIME_H */
