# SPDX-License-Identifier: Apache-2.0
# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary,
# the multi-node rendezvous, the job's cgroup). Its API is agent/include/agent.h: the job it runs
# (agent_job_t). stacks.c (stack capture of a hung worker's process group) and gpu_mem.c (waiting
# for a stopped group's GPU memory, NVML dlopen'ed) are the building blocks of hang recovery:
# hang.c (heartbeat deadlines, capture, progress) and gpu_wait.c (the wait before a restart).
# events.c (--event_log_handler json) and metrics.c (--metrics) say what happens, for machines.
AGENT_SRCS := agent/agent.c agent/job.c agent/group.c agent/worker.c agent/output.c agent/supervise.c \
              agent/summary.c agent/guard.c agent/rdzv.c agent/prefix.c agent/cgroup.c \
              agent/errfile.c agent/stacks.c agent/gpu_mem.c agent/hang.c agent/events.c \
              agent/metrics.c agent/scratch.c agent/health.c agent/console.c agent/store.c \
               agent/assignment.c agent/rdzv_ops.c agent/rdzv_link.c agent/rdzv_barrier.c \
               agent/gpu_wait.c agent/node_check.c agent/session.c agent/goodput.c \
               agent/goodput_calc.c agent/rdzv_elect.c agent/rdzv_durable.c \
               agent/straggler.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# Unit tests (cmocka); they see the agent's private headers.
$(BUILD)/obj/tests/unit/test_agent_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_agent_%.o: CPPFLAGS += -Iagent

# test_agent_supervise (every cell of the table), test_agent_supervise_restart and
# test_agent_supervise_rdzv (paths through it) link supervise.c with worker.c (the failure records
# the table keeps) and events.c (silent unless a job asks): their fixture
# (tests/unit/supervise_fixture.h) defines the other agent functions the table calls and replaces
# the loop's timers and kill() through the linker.
SUPERVISE_TESTS := $(BUILD)/tests/unit/test_agent_supervise \
    $(BUILD)/tests/unit/test_agent_supervise_restart $(BUILD)/tests/unit/test_agent_supervise_rdzv
UNIT_TESTS += $(SUPERVISE_TESTS)
$(SUPERVISE_TESTS): $(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o \
    $(BUILD)/obj/agent/supervise.o $(BUILD)/obj/agent/worker.o $(BUILD)/obj/agent/events.o \
    $(BUILD)/obj/agent/assignment.o $(BUILD)/obj/agent/rdzv_ops.o $(BUILD)/obj/agent/goodput.o \
    $(BUILD)/obj/agent/goodput_calc.o $(BUILD)/libddpcommon.a
$(SUPERVISE_TESTS): LDFLAGS += -Wl,--wrap=uv_timer_start,--wrap=uv_timer_stop,--wrap=kill

# test_agent_rdzv_link and test_agent_rdzv_barrier link rdzv_link.c and rdzv_barrier.c alone: each
# test defines the rendezvous calls and the agent functions its file makes, and replaces the
# loop's clock (and timers) through the linker.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_rdzv_link $(BUILD)/tests/unit/test_agent_rdzv_barrier
$(BUILD)/tests/unit/test_agent_rdzv_link: $(BUILD)/obj/tests/unit/test_agent_rdzv_link.o \
    $(BUILD)/obj/agent/rdzv_link.o $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_agent_rdzv_link: LDFLAGS += -Wl,--wrap=uv_now,--wrap=uv_timer_init \
    -Wl,--wrap=uv_timer_start,--wrap=uv_timer_stop,--wrap=uv_is_active
$(BUILD)/tests/unit/test_agent_rdzv_barrier: $(BUILD)/obj/tests/unit/test_agent_rdzv_barrier.o \
    $(BUILD)/obj/agent/rdzv_barrier.o $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_agent_rdzv_barrier: LDFLAGS += -Wl,--wrap=uv_now

# test_agent_rdzv_elect links rdzv_elect.c with the etcd library (a follower never calls it):
# the test defines the records keeper and the store's setters, and replaces the loop's clock.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_rdzv_elect
$(BUILD)/tests/unit/test_agent_rdzv_elect: $(BUILD)/obj/tests/unit/test_agent_rdzv_elect.o \
    $(BUILD)/obj/agent/rdzv_elect.o $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_agent_rdzv_elect: LDFLAGS += -Wl,--wrap=uv_now

# test_agent_stacks captures a spin_worker, which spins in a named function: -O0 -g keep the
# frame gdb must name.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_stacks
$(BUILD)/tests/unit/test_agent_stacks: $(BUILD)/obj/tests/unit/test_agent_stacks.o \
    $(BUILD)/libagent.a $(BUILD)/libddpcommon.a | $(BUILD)/tests/spin_worker
HELPERS += $(BUILD)/tests/spin_worker
$(BUILD)/obj/tests/helpers/spin_worker.o: CFLAGS += -O0 -g
$(BUILD)/tests/spin_worker: $(BUILD)/obj/tests/helpers/spin_worker.o
	$(LINK)

UNIT_TESTS += $(BUILD)/tests/unit/test_agent_health
$(BUILD)/tests/unit/test_agent_health: $(BUILD)/obj/tests/unit/test_agent_health.o \
    $(BUILD)/obj/agent/health.o $(BUILD)/libddpcommon.a

# test_agent_gpu_mem dlopens a fake NVML built next to it.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_gpu_mem
$(BUILD)/tests/unit/test_agent_gpu_mem: $(BUILD)/obj/tests/unit/test_agent_gpu_mem.o \
    $(BUILD)/libagent.a $(BUILD)/libddpcommon.a | $(BUILD)/tests/unit/libfakenvml.so
$(BUILD)/tests/unit/libfakenvml.so: $(BUILD)/obj/tests/unit/test_fakenvml.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -o $@ $^

# test_agent_goodput: goodput_calc.c's arithmetic, fed recorded times.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_goodput
$(BUILD)/tests/unit/test_agent_goodput: $(BUILD)/obj/tests/unit/test_agent_goodput.o \
    $(BUILD)/obj/agent/goodput_calc.o
