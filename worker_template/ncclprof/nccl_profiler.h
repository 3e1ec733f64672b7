/* SPDX-License-Identifier: Apache-2.0
 * nccl_profiler.h: the types of NCCL's profiler plugin interface, versions 5 (NCCL 2.28, and
 * later NCCL through its adapter) and 4 (NCCL 2.27), written out struct for struct because
 * neither the CUDA toolkit nor NCCL's package installs them: NCCL expects a plugin to carry its
 * own copy. The layout follows NVIDIA/nccl at v2.28.9-1, ext-profiler/example/nccl/
 * {profiler_v5.h,profiler_v4.h,common.h,err.h} and src/include/plugin/nccl_profiler.h (event type
 * bits, state numbers); only the names NCCL looks up (ncclProfiler_v5, ncclProfiler_v4) and the
 * layout matter, so the members ddprun does not read are still here, in their places. */
#ifndef NCCL_PROFILER_H
#define NCCL_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
} ncclResult_t;

typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

/* The subsystem bit NCCL prints by default with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,...). */
#define NCCL_PROFILER_LOG_INIT 1UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);

/* Event types: the bits of the activation mask and ncclProfilerEventDescr_v5_t.type. */
enum {
    ncclProfileGroup = (1 << 0),
    ncclProfileColl = (1 << 1),
    ncclProfileP2p = (1 << 2),
    ncclProfileProxyOp = (1 << 3),
    ncclProfileProxyStep = (1 << 4),
    ncclProfileProxyCtrl = (1 << 5),
    ncclProfileKernelCh = (1 << 6),
    ncclProfileNetPlugin = (1 << 7),
    ncclProfileGroupApi = (1 << 8),
    ncclProfileCollApi = (1 << 9),
    ncclProfileP2pApi = (1 << 10),
    ncclProfileKernelLaunch = (1 << 11),
};

/* recordEventState's states (the same numbers in v4 and v5); only the kernel channel's stop is
 * read here (the rest of NCCL's enum, numbers 0-21 and 23-24, concerns proxy, network and group
 * API events). */
typedef int ncclProfilerEventState_v5_t;
typedef int ncclProfilerEventState_v4_t;
#define ncclProfilerKernelChStop 22

typedef struct {
    uint64_t type;   /* one ncclProfile* bit */
    void *parentObj; /* the parent event's handle, as this plugin returned it (or NULL) */
    int rank;
    union {
        struct {
            int graphCaptured;
            int groupDepth;
        } groupApi;
        struct {
            const char *func;
            size_t count;
            const char *datatype;
            int root;
            void *stream;
            bool graphCaptured;
        } collApi;
        struct {
            const char *func;
            size_t count;
            const char *datatype;
            void *stream;
            bool graphCaptured;
        } p2pApi;
        struct {
            void *stream;
        } kernelLaunch;
        struct {
            uint64_t seqNumber;
            const char *func;
            void const *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
            void *parentGroup;
        } coll;
        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
            void *parentGroup;
        } p2p;
        struct {
            pid_t pid;
            uint8_t channelId;
            int peer;
            int nSteps;
            int chunkSize;
            int isSend;
        } proxyOp;
        struct {
            int step;
        } proxyStep;
        struct {
            uint8_t channelId;
            uint64_t pTimer; /* the GPU's globaltimer (ns) when the channel started the work */
        } kernelCh;
        struct {
            int64_t id;
            void *data;
        } netPlugin;
    };
} ncclProfilerEventDescr_v5_t;

typedef union {
    struct {
        size_t transSize;
    } proxyStep;
    struct {
        int appendedProxyOps;
    } proxyCtrl;
    struct {
        void *data;
    } netPlugin;
    struct {
        uint64_t pTimer; /* with ncclProfilerKernelChStop: globaltimer when the channel finished */
    } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

/* Version 4's state arguments are version 5's, member for member. */
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v4_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v5_t eState,
                                     ncclProfilerEventStateArgs_v5_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

/* Version 4 (NCCL 2.27): a one-byte type, no API events, init's arguments in another order. */
typedef struct {
    uint8_t type;
    void *parentObj; /* a collective's parent is its group event */
    int rank;
    union {
        struct {
            uint64_t seqNumber;
            const char *func;
            void const *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
        } coll;
        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
        } p2p;
        struct {
            pid_t pid;
            uint8_t channelId;
            int peer;
            int nSteps;
            int chunkSize;
            int isSend;
        } proxyOp;
        struct {
            int step;
        } proxyStep;
        struct {
            uint8_t channelId;
            uint64_t pTimer;
        } kernelCh;
        struct {
            int64_t id;
            void *data;
        } netPlugin;
    };
} ncclProfilerEventDescr_v4_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                         uint64_t commHash, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v4_t eState,
                                     ncclProfilerEventStateArgs_v4_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

#endif
