# SPDX-License-Identifier: Apache-2.0
# worker_template/: libddpw (ddpw.h: env -> ranks, store, CPU/NCCL collectives, error files) and
# train, the data-parallel MLP trainer (C on the CPU, .cu on the GPU when HAVE_CUDA=1).
DDPW_SRCS := worker_template/ddpw.c worker_template/ddpw_shm.c worker_template/ddpw_tcp.c \
             worker_template/ddpw_nccl.c worker_template/ddpw_store.c worker_template/ddpw_backend.c \
             worker_template/ddpw_errfile.c worker_template/ddpw_heartbeat.c \
             worker_template/ddpw_keys.c worker_template/ddpw_timing.c
$(BUILD)/libddpw.a: $(call objs,$(DDPW_SRCS))
LIBS += $(BUILD)/libddpw.a
INSTALL_HEADERS += worker_template/include/ddpw.h
# The reduction loops want vectorizing (-O3); the rest of the tree keeps $(OPT).
$(BUILD)/obj/worker_template/ddpw_shm.o: CFLAGS += -O3

# libnccl-profiler-ddprun.so: NCCL's profiler plugin (NCCL_PROFILER_PLUGIN=ddprun, or its path),
# which times a program's NCCL collectives for the agent without a change to the program. Built
# on every build: it needs NCCL's profiler types alone, which it carries
# (ncclprof/nccl_profiler.h), not NCCL. It exports ncclProfiler_v5 and _v4
# and nothing else.
NCCLPROF_SRCS := worker_template/ncclprof/ncclprof.c worker_template/ncclprof/ncclprof_acct.c
NCCLPROF_SO := $(BUILD)/lib/libnccl-profiler-ddprun.so
NCCLPROF_MAP := worker_template/ncclprof/ncclprof.map
LIBS += $(NCCLPROF_SO)
$(call objs,$(NCCLPROF_SRCS)): CPPFLAGS += -Iworker_template/ncclprof
$(NCCLPROF_SO): $(call objs,$(NCCLPROF_SRCS)) $(BUILD)/libddpw.a $(BUILD)/libddpcommon.a \
    $(NCCLPROF_MAP)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -Wl,--version-script=$(NCCLPROF_MAP) -Wl,--no-undefined \
	    -Wl,--as-needed -o $@ \
	    $(filter %.o %.a,$^) -lpthread

# train: everything but main.c goes in an internal archive the unit tests link too.
TRAIN_SRCS := worker_template/train/mlp.c worker_template/train/data.c \
              worker_template/train/sampler.c worker_template/train/ckpt.c \
              worker_template/train/rng.c worker_template/train/args.c \
              worker_template/train/loop.c worker_template/train/fileio.c
ifeq ($(HAVE_CUDA),1)
TRAIN_SRCS += worker_template/train/mlp_cuda.cu
endif
$(BUILD)/libtraincore.a: $(call objs,$(TRAIN_SRCS))
# train keeps its store keys under the library's round prefix, named in ddpw_keys.h with the
# library's own.
$(BUILD)/obj/worker_template/train/loop.o: CPPFLAGS += -Iworker_template
$(BUILD)/obj/worker_template/train/mlp.o: CFLAGS += -O3
TRAIN_LIBS := $(BUILD)/libtraincore.a $(BUILD)/libddpw.a $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
BINS += $(BUILD)/train
$(BUILD)/train: EXTRA_LIBS += -lopenblas $(CUDA_LIBS)
$(BUILD)/train: $(BUILD)/obj/worker_template/train/main.o $(TRAIN_LIBS)
	$(LINK)

# libddpw's unit tests, one binary per area: env (environment, error file), coll (CPU
# collectives, bounded waits), backend (NCCL id, backend choice), keys (the store key layout),
# heartbeat. Those that need a store or forked ranks share tests/unit/ddpw_fixture.h.
DDPW_UNIT_TESTS := $(addprefix $(BUILD)/tests/unit/test_ddpw_,env coll backend keys heartbeat timing)
UNIT_TESTS += $(DDPW_UNIT_TESTS) $(BUILD)/tests/unit/test_train
$(DDPW_UNIT_TESTS): $(BUILD)/tests/unit/test_ddpw_%: $(BUILD)/obj/tests/unit/test_ddpw_%.o \
    $(BUILD)/libddpw.a $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
# The heartbeat tests count (and fail) the library's writes.
$(BUILD)/tests/unit/test_ddpw_heartbeat: LDFLAGS += -Wl,--wrap=pwrite
$(BUILD)/tests/unit/test_train: EXTRA_LIBS += -lopenblas
# The profiler plugin's test drives its entry points as NCCL does (ncclprof_int.h), then loads
# the built library (it must be there: a prerequisite, not linked).
UNIT_TESTS += $(BUILD)/tests/unit/test_ddpw_ncclprof
$(BUILD)/obj/tests/unit/test_ddpw_ncclprof.o: CPPFLAGS += -Iworker_template/ncclprof
$(BUILD)/tests/unit/test_ddpw_ncclprof: $(BUILD)/obj/tests/unit/test_ddpw_ncclprof.o \
    $(call objs,$(NCCLPROF_SRCS)) $(BUILD)/libddpw.a $(BUILD)/libddpcommon.a $(NCCLPROF_SO)
$(BUILD)/tests/unit/test_train: $(BUILD)/obj/tests/unit/test_train.o $(TRAIN_LIBS)

BENCHES += $(BUILD)/bench/bench_allreduce
$(BUILD)/bench/bench_allreduce: EXTRA_LIBS += $(CUDA_LIBS)
$(BUILD)/bench/bench_allreduce: $(BUILD)/obj/bench/bench_allreduce.o $(BUILD)/libddpw.a \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
	$(LINK)

# nccl_direct: a program that calls NCCL itself (as PyTorch does), for the profiler plugin's
# check in gpu-check. Only where NCCL is.
ifeq ($(HAVE_CUDA),1)
NCCL_DIRECT := $(BUILD)/tests/nccl_direct
HELPERS += $(NCCL_DIRECT)
$(NCCL_DIRECT): EXTRA_LIBS += $(CUDA_LIBS)
$(NCCL_DIRECT): $(BUILD)/obj/tests/helpers/nccl_direct.o $(BUILD)/libddpw.a $(BUILD)/librdzv.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
endif

gpu-check test-gpu: $(BUILD)/train $(BUILD)/bench/bench_allreduce $(BUILD)/bench/bench_gpu \
    $(BUILD)/ddprun $(BUILD)/tests/unit/test_train $(NCCLPROF_SO) $(NCCL_DIRECT)
	@BUILD=$(BUILD) worker_template/gpu_check.sh
$(BUILD)/obj/tests/unit/test_ddpw_%.o $(BUILD)/obj/tests/unit/test_train.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_train.o: CPPFLAGS += -Iworker_template/train
$(BUILD)/obj/tests/unit/test_ddpw_%.o: CPPFLAGS += -Iworker_template
