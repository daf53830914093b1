/*
 * NCCL on the emulated CUDA device, not provided yet: a communicator
 * cannot be created, so every collective is refused.
 */

#include <string.h>

#include "nccl.h"


extern "C" {

const char *
ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage:
        return "invalid usage (NCCL is not emulated by cudaemu)";
    case ncclInvalidArgument: return "invalid argument";
    default: return "NCCL error";
    }
}


ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof(*id));
    return ncclInvalidUsage;
}


ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int n_ranks, ncclUniqueId id, int rank)
{
    (void) n_ranks;
    (void) id;
    (void) rank;

    *comm = NULL;
    return ncclInvalidUsage;
}


ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
    return comm == NULL ? ncclSuccess : ncclInvalidArgument;
}


ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
    return ncclCommAbort(comm);
}


ncclResult_t
ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    (void) comm;

    *async = ncclInvalidUsage;
    return ncclSuccess;
}


ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    return ncclInvalidUsage;
}


ncclResult_t
ncclAllGather(const void *send, void *recv, size_t count,
    ncclDataType_t type, ncclComm_t comm, cudaStream_t s)
{
    return ncclInvalidUsage;
}


ncclResult_t
ncclBroadcast(const void *send, void *recv, size_t count,
    ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t s)
{
    return ncclInvalidUsage;
}

} /* extern "C" */
