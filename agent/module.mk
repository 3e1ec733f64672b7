# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary).
AGENT_SRCS := agent/agent.c agent/spawn.c agent/output.c agent/supervise.c agent/summary.c \
              agent/guard.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# The ddprun program: the launcher's parser, this agent and the embedded store.
BINS += $(BUILD)/ddprun
$(BUILD)/ddprun: $(BUILD)/obj/launcher/main.o $(BUILD)/liblaunch.a $(BUILD)/libagent.a \
                 $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
	$(LINK)
