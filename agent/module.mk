# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary,
# the multi-node rendezvous). Its API is agent/include/agent.h: the job it runs (agent_job_t).
AGENT_SRCS := agent/agent.c agent/job.c agent/spawn.c agent/output.c agent/supervise.c \
              agent/summary.c agent/guard.c agent/rdzv.c agent/prefix.c agent/cgroup.c \
              agent/errfile.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# Unit tests (cmocka). test_agent_supervise links supervise.c alone: the test defines the agent
# functions the table calls and replaces the loop's timers and kill() through the linker.
UNIT_TESTS += $(BUILD)/tests/unit/test_agent_supervise
$(BUILD)/tests/unit/test_agent_supervise: $(BUILD)/obj/tests/unit/test_agent_supervise.o \
    $(BUILD)/obj/agent/supervise.o $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_agent_supervise: LDFLAGS += \
    -Wl,--wrap=uv_timer_start,--wrap=uv_timer_stop,--wrap=kill
$(BUILD)/obj/tests/unit/test_agent_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_agent_%.o: CPPFLAGS += -Iagent
