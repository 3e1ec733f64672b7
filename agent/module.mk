# agent/: libagent.a, the per-node agent (spawn, output routing, supervision, failure summary,
# the multi-node rendezvous). Its API is agent/include/agent.h: the job it runs (agent_job_t).
AGENT_SRCS := agent/agent.c agent/job.c agent/spawn.c agent/output.c agent/supervise.c \
              agent/summary.c agent/guard.c agent/rdzv.c agent/prefix.c agent/cgroup.c \
              agent/errfile.c
$(BUILD)/libagent.a: $(call objs,$(AGENT_SRCS))
LIBS += $(BUILD)/libagent.a

# Transitional: the agent reads the rendezvous codec from rendezvous/rdzv_round_int.h.
$(call objs,$(AGENT_SRCS)): CPPFLAGS += -Irendezvous
