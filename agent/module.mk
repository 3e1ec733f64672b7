# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary,
# the multi-node rendezvous). Its API is agent/include/agent.h: the job it runs (agent_job_t).
AGENT_SRCS := agent/agent.c agent/job.c agent/spawn.c agent/output.c agent/supervise.c \
              agent/summary.c agent/guard.c agent/rdzv.c agent/prefix.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# Hang diagnosis: stack capture of a worker's process group (stacks.c, private header stacks.h).
AGENT_SRCS += agent/stacks.c
$(BUILD)/libagent.a: $(BUILD)/obj/agent/stacks.o
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_stacks
$(BUILD)/tests/unit/test_agent_stacks: $(BUILD)/obj/tests/unit/test_agent_stacks.o \
    $(BUILD)/libagent.a $(BUILD)/libddpcommon.a | $(BUILD)/tests/spin_worker
$(BUILD)/obj/tests/unit/test_agent_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_agent_%.o: CPPFLAGS += -Iagent
# spin_worker spins in a named function: -O0 -g keep the frame gdb must name.
HELPERS += $(BUILD)/tests/spin_worker
$(BUILD)/obj/tests/helpers/spin_worker.o: CFLAGS += -O0 -g
$(BUILD)/tests/spin_worker: $(BUILD)/obj/tests/helpers/spin_worker.o
	$(LINK)

# Restarts on a GPU node wait for the old group's GPU memory (gpu_mem.c, private header
# gpu_mem.h); NVML is dlopen'ed. Its test dlopens a fake NVML built next to it.
AGENT_SRCS += agent/gpu_mem.c
$(BUILD)/libagent.a: $(BUILD)/obj/agent/gpu_mem.o
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_gpu_mem
$(BUILD)/tests/unit/test_agent_gpu_mem: $(BUILD)/obj/tests/unit/test_agent_gpu_mem.o \
    $(BUILD)/libagent.a $(BUILD)/libddpcommon.a | $(BUILD)/tests/unit/libfakenvml.so
$(BUILD)/tests/unit/libfakenvml.so: $(BUILD)/obj/tests/unit/test_fakenvml.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -o $@ $^
