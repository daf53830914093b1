/*
 * NCCL on the emulated CUDA device: the types and calls of the NCCL
 * communicator that the CUDA backend uses, between rank processes of one
 * machine through POSIX shared memory (cudaemu_nccl.cc).
 */

#ifndef CUDAEMU_NCCL_H
#define CUDAEMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3,
    ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclFloat32 = 7,
    ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;

#define ncclInt     ncclInt32
#define ncclUint    ncclUint32
#define ncclFloat   ncclFloat32
#define ncclDouble  ncclFloat64

typedef enum {
    ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4
} ncclRedOp_t;

typedef struct {
    char  internal[128];
} ncclUniqueId;

typedef struct cudaemu_nccl_s  *ncclComm_t;


const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n_ranks,
    ncclUniqueId id, int rank);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
    ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t s);


#ifdef __cplusplus
}
#endif

#endif /* CUDAEMU_NCCL_H */
