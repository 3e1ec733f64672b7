# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary).
AGENT_SRCS := agent/agent.c agent/spawn.c agent/output.c agent/supervise.c agent/summary.c \
              agent/guard.c agent/rdzv.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# Transitional: agent.h still takes the launcher's launch_spec_t.
$(call objs,$(AGENT_SRCS)): CPPFLAGS += -Ilauncher
