# SPDX-License-Identifier: Apache-2.0
# launcher/: liblaunch.a, the parsing side of ddprun: torchrun flags (cli.c), the worker argv
# (program.c), --nproc_per_node kinds (nproc.c), Slurm hostlists and derivation (hostlist.c,
# slurm.c), --numa_binding (numa.c: topology and plans; numa_setup.c: the job's plan), and the
# job it hands the agent (job.c), `ddprun status` (status.c, whose flags completion.c offers;
# status_etcd.c: the store etcd elected), `ddprun report` (report.c: the events read into a
# timeline; report_svg.c: its picture), many hosts over ssh (hostfile.c; ssh.c: the run's
# libuv loop, ssh_host.c: each host's phase x event table; ssh_session.c: the agent's side).
# launcher/main.c links it into build/ddprun.
LAUNCH_SRCS := launcher/cli.c launcher/cli_values.c launcher/cli_rules.c launcher/cli_help.c launcher/program.c \
               launcher/nproc.c launcher/hostlist.c launcher/slurm.c launcher/job.c \
               launcher/numa.c launcher/numa_setup.c launcher/completion.c launcher/k8s.c \
               launcher/status.c launcher/status_etcd.c launcher/report.c launcher/report_svg.c launcher/hostfile.c launcher/ssh.c launcher/ssh_host.c launcher/ssh_session.c \
               launcher/env.c
$(BUILD)/liblaunch.a: $(call objs,$(LAUNCH_SRCS))
LIBS += $(BUILD)/liblaunch.a
# The launcher's headers are all private (beside its sources); its unit tests see them too.
$(BUILD)/obj/tests/unit/test_launch_%.o $(BUILD)/obj/tests/unit/test_slurm.o \
    $(BUILD)/obj/tests/unit/test_hostlist.o: CPPFLAGS += -Ilauncher

# Unit tests (cmocka).
UNIT_TESTS += $(BUILD)/tests/unit/test_launch_cli $(BUILD)/tests/unit/test_launch_cli_values \
              $(BUILD)/tests/unit/test_launch_cli_job $(BUILD)/tests/unit/test_launch_cli_program \
              $(BUILD)/tests/unit/test_launch_nproc \
              $(BUILD)/tests/unit/test_hostlist $(BUILD)/tests/unit/test_slurm \
              $(BUILD)/tests/unit/test_launch_numa $(BUILD)/tests/unit/test_launch_k8s \
              $(BUILD)/tests/unit/test_launch_hosts $(BUILD)/tests/unit/test_launch_ssh_host
# test_launch_ssh_host links ssh_host.c alone: the test defines the loop's primitives it calls
# (ssh.c's), so no ssh runs and no loop turns.
$(BUILD)/tests/unit/test_launch_ssh_host: $(BUILD)/obj/tests/unit/test_launch_ssh_host.o \
    $(BUILD)/obj/launcher/ssh_host.o $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_hosts: $(BUILD)/obj/tests/unit/test_launch_hosts.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_k8s: $(BUILD)/obj/tests/unit/test_launch_k8s.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_numa: $(BUILD)/obj/tests/unit/test_launch_numa.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_cli: $(BUILD)/obj/tests/unit/test_launch_cli.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_cli_values: $(BUILD)/obj/tests/unit/test_launch_cli_values.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_cli_job: $(BUILD)/obj/tests/unit/test_launch_cli_job.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_launch_cli_program: $(BUILD)/obj/tests/unit/test_launch_cli_program.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_hostlist: $(BUILD)/obj/tests/unit/test_hostlist.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_slurm: $(BUILD)/obj/tests/unit/test_slurm.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
# test_launch_nproc dlopens a fake libcuda built next to it (found through /proc/self/exe).
$(BUILD)/tests/unit/test_launch_nproc: $(BUILD)/obj/tests/unit/test_launch_nproc.o \
    $(BUILD)/liblaunch.a $(BUILD)/libagent.a $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a | $(BUILD)/tests/unit/libfakecuda.so
$(BUILD)/tests/unit/libfakecuda.so: $(BUILD)/obj/tests/unit/test_launch_fakecuda.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -o $@ $^

# The ddprun program: this parser, the agent and the embedded store (launcher/main.c).
BINS += $(BUILD)/ddprun
$(BUILD)/ddprun: $(BUILD)/obj/launcher/main.o $(BUILD)/liblaunch.a $(BUILD)/libagent.a \
                 $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
	$(LINK)

# ddprun is on the critical path of every job start: link libuv, jansson and libcrypto into it
# statically when their archives exist (Debian's -dev packages ship them). That saves the dynamic
# relocation of libcrypto at every start, a fifth of the launch overhead (docs/BENCHMARKS.md).
# ddp-rendezvous too: both then run where those libraries are not installed (the wheel,
# pyproject.toml). STATIC_DEPS=0 links them dynamically like the other programs.
STATIC_DEPS ?= 1
DDPRUN_ARCHIVES := $(foreach l,libuv_a.a libjansson.a libcrypto.a,$(shell $(CC) -print-file-name=$(l)))
ifeq ($(STATIC_DEPS),1)
ifeq ($(words $(filter /%,$(DDPRUN_ARCHIVES))),3)
$(BUILD)/ddprun $(BUILD)/ddp-rendezvous: LDLIBS := $(DDPRUN_ARCHIVES) -lpthread -lm -ldl
endif
endif
