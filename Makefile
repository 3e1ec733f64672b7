# SPDX-License-Identifier: Apache-2.0
# ddprun: one non-recursive Makefile. Each capability directory adds its sources, programs and
# tests through its own module.mk (included below); this file holds the toolchain and generic rules.
#
#   make                      build everything into build/
#   make run                  the main job: ddprun --standalone training the template MLP
#   make test                 unit tests (cmocka) + integration tests, one summary line at the end
#   make bench                benchmarks; results go to docs/BENCHMARKS.md by hand (see that file)
#   make bench-scale          the rendezvous at 1,000-16,000 simulated nodes, and torchrun's
#   make bench-etcd           the death of the store's host on --rdzv_backend=etcd, and torchrun's
#   make bench-smoke          every benchmark at its smallest size, as a test (make test runs it)
#   make SANITIZE=address,undefined test      sanitizer build in build-san/
#   make install PREFIX=/usr/local
#   make deb                  the Debian packages, into build/ (debian/)
#   make deps                 print the apt-get line for Debian 12

.DEFAULT_GOAL := all
SANITIZE ?=
ifneq ($(SANITIZE),)
BUILD ?= build-san
else
BUILD ?= build
endif

CC ?= cc
PKG_CONFIG ?= pkg-config
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
# Hopper (H100/H200) and Ampere cubins plus PTX for newer parts; override for other GPUs.
NVCC_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
WERROR ?= 1
OPT ?= -O2
PREFIX ?= /usr/local
# Where `make install` puts the libraries (and ddpw.pc under pkgconfig/) and the headers (under
# ddprun/); a distribution sets its own (Debian: LIBDIR=/usr/lib/<multiarch>, debian/rules).
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
# The version ddpw.pc carries: pyproject.toml's (the wheel's; debian/changelog must agree).
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
# Where `make install` puts the systemd unit: systemd reads $(PREFIX)/lib/systemd/system for the
# prefixes it knows (/usr, /usr/local); with another PREFIX, link the unit into /etc/systemd/system.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
APT_PACKAGES := build-essential pkg-config libuv1-dev libjansson-dev libssl-dev libcmocka-dev \
                libcurl4-openssl-dev \
                libopenblas-dev python3 iproute2 procps

HAVE_CUDA := $(shell test -x $(NVCC) && test -f $(CUDA_HOME)/include/nccl.h && echo 1)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wvla
ifeq ($(WERROR),1)
WARN += -Werror
endif
PKGS := libuv jansson libcrypto
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
CMOCKA_CFLAGS := $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
CMOCKA_LIBS := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null)

# Only the public headers (each library's include/) are on every object's path; a module's own
# directory (its private *_int.h headers) is added for its own objects and tests in its module.mk.
# The store's public headers: its clients, its server, the protocol they share. The round machine
# (rendezvous/round/include) is the server's alone.
RDZV_PUBLIC_INCLUDES := -Irendezvous/protocol/include -Irendezvous/client/include \
    -Irendezvous/server/include
PUBLIC_INCLUDES := -Icommon/include $(RDZV_PUBLIC_INCLUDES) -Iworker_template/include -Iagent/include
CPPFLAGS += -D_GNU_SOURCE $(PUBLIC_INCLUDES)
CFLAGS ?= $(OPT) -g
CFLAGS += -std=c11 -fPIC $(WARN) -MMD -MP $(PKG_CFLAGS)
LDLIBS += $(PKG_LIBS) -lpthread -lm -ldl

ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
CFLAGS += $(SAN_FLAGS)
LDFLAGS += $(SAN_FLAGS)
endif

ifeq ($(HAVE_CUDA),1)
CPPFLAGS += -DDDP_HAVE_CUDA=1 -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lnccl -lstdc++
# What libddpw's NCCL backend adds to a worker's link line (ddpw.pc).
DDPW_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lnccl
NVCCFLAGS ?= -O2 -std=c++17 $(NVCC_GENCODE) -Xcompiler -fPIC,-Wall
else
CUDA_LIBS :=
DDPW_CUDA_LIBS :=
endif

# objs: object files for a list of .c/.cu sources under $(BUILD)/obj.
objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(filter %.c,$1)) \
       $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(filter %.cu,$1))

# Link a program from the .o and .a prerequisites, in order.
LINK = @mkdir -p $(@D) && echo "  LD      $@" && \
       $(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(LDLIBS) $(EXTRA_LIBS)

BINS :=
LIBS :=
UNIT_TESTS :=
HELPERS :=
BENCHES :=
# Man pages: OPTIONS come from each program's --help (scripts/help2man.py), the rest from
# docs/man/*.in.
MANPAGES := $(BUILD)/man/ddprun.1 $(BUILD)/man/ddp-rendezvous.8
# What a worker program links (the worker library and what it needs); the rest is internal.
INSTALL_LIBS = $(BUILD)/libddpw.a $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a

include common/module.mk
include rendezvous/module.mk
include rendezvous/etcd/module.mk
include worker_template/module.mk
include agent/module.mk
include launcher/module.mk
include tests/module.mk
-include bench/module.mk

.PHONY: run all test test-unit test-integration test-gpu bench bench-scale bench-etcd bench-smoke chaos install \
        installables deb deps clean fuzz format lint man cpu-note gpu-check
all: cpu-note $(LIBS) $(BINS) $(HELPERS)

# The main job (README quick start): 2 CPU workers, or one per GPU.
run: all
	@BUILD=$(BUILD) scripts/run-demo.sh $(RUN_ARGS)

cpu-note:
ifneq ($(HAVE_CUDA),1)
	@echo "note: $(NVCC) or NCCL not found: building the CPU-only variant (no CUDA path in train)"
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	@$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	@$(NVCC) $(filter -D% -I%,$(CPPFLAGS)) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/%.a:
	@mkdir -p $(@D)
	@echo "  AR      $@"
	@rm -f $@ && ar rcs $@ $^

# Unit tests link cmocka and whatever libraries their module.mk lists as prerequisites.
$(UNIT_TESTS): EXTRA_LIBS += $(CMOCKA_LIBS) $(CUDA_LIBS)
$(UNIT_TESTS):
	$(LINK)

test: all $(UNIT_TESTS) $(BENCHES) $(MANPAGES)
	@BUILD=$(BUILD) UNIT_TESTS="$(UNIT_TESTS)" tests/run_all.sh

test-unit: all $(UNIT_TESTS)
	@BUILD=$(BUILD) UNIT_TESTS="$(UNIT_TESTS)" tests/run_all.sh --unit-only

test-integration: all $(BENCHES) $(MANPAGES)
	@BUILD=$(BUILD) tests/run_all.sh --integration-only

bench: all $(BENCHES)
	@BUILD=$(BUILD) bench/run.sh

# Every rendezvous path at 1,000-16,000 simulated nodes, torchrun's for reference, and the etcd
# backend's election at 1,000 and 16,000 (~13 min).
bench-scale: all $(BENCHES)
	@BUILD=$(BUILD) bench/scale.sh

# The death of the store's host on --rdzv_backend=etcd against torchrun's etcd-v2 and c10d (~20 min).
bench-etcd: all $(BENCHES)
	@BUILD=$(BUILD) bench/etcd_failover.sh

# Every bench/*.sh at its smallest size (under a minute in all): each must measure every figure,
# and fail when a program it needs fails (tests/integration/test_bench_smoke.sh, a suite of
# `make test`), so that a change that breaks a benchmark fails the tests.
bench-smoke: all $(BENCHES)
	@BUILD=$(BUILD) tests/integration/run.sh tests/integration/test_bench_smoke.sh

# The fault-injection campaign (docs/RELIABILITY.md; root: network namespaces). CHAOS_MINUTES
# (default 2) and CHAOS_SEED (default random, printed) choose it; `make test` runs the short one as
# root (tests/integration/test_chaos.sh).
CHAOS_MINUTES ?= 2
chaos: all
	@CHAOS_SEED=$(CHAOS_SEED) python3 tests/chaos/chaos.py --bin $(BUILD) --minutes $(CHAOS_MINUTES)

man: $(MANPAGES)
$(BUILD)/man/ddprun.1: docs/man/ddprun.1.in scripts/help2man.py $(BUILD)/ddprun
	@mkdir -p $(@D)
	@echo "  MAN     $@"
	@python3 scripts/help2man.py $< $@ $(BUILD)/ddprun
$(BUILD)/man/ddp-rendezvous.8: docs/man/ddp-rendezvous.8.in scripts/help2man.py \
    $(BUILD)/ddp-rendezvous
	@mkdir -p $(@D)
	@echo "  MAN     $@"
	@python3 scripts/help2man.py $< $@ $(BUILD)/ddp-rendezvous

# What `make install` installs, built (and nothing else: no test helper); make deb's build step.
installables: $(BINS) $(INSTALL_LIBS) $(MANPAGES) $(NCCLPROF_SO)

install: installables
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/ddprun \
	    $(DESTDIR)$(PREFIX)/libexec/ddprun $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	    $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	install -m 644 $(BUILD)/man/ddprun.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(BUILD)/man/ddp-rendezvous.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	$(BUILD)/ddprun --print_completion bash \
	    >$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ddprun
	install -m 755 $(BUILD)/ddprun $(BUILD)/ddp-rendezvous $(DESTDIR)$(PREFIX)/bin/
	@# The unit names the daemon where this install put it (the file in contrib/ names /usr/bin,
	@# a distribution's path); a unit whose ExecStart is missing would fail at its first start.
	sed 's|^ExecStart=/usr/bin/ddp-rendezvous |ExecStart=$(PREFIX)/bin/ddp-rendezvous |' \
	    contrib/systemd/ddp-rendezvous.service >$(DESTDIR)$(SYSTEMD_UNIT_DIR)/ddp-rendezvous.service
	grep -q '^ExecStart=$(PREFIX)/bin/ddp-rendezvous ' \
	    $(DESTDIR)$(SYSTEMD_UNIT_DIR)/ddp-rendezvous.service
	chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/ddp-rendezvous.service
	install -m 755 $(BUILD)/train $(DESTDIR)$(PREFIX)/libexec/ddprun/
	install -m 644 $(INSTALL_LIBS) $(DESTDIR)$(LIBDIR)/
	@# NCCL's profiler plugin, a private library: NCCL_PROFILER_PLUGIN names its path.
	install -d $(DESTDIR)$(LIBDIR)/ddprun
	install -m 644 $(NCCLPROF_SO) $(DESTDIR)$(LIBDIR)/ddprun/
	install -m 644 $(INSTALL_HEADERS) common/include/ddp_err.h common/include/ddp_buf.h \
	    $(DESTDIR)$(INCLUDEDIR)/ddprun/
	@# pkg-config's view of them: `cc $$(pkg-config --cflags --libs ddpw)` builds a worker.
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@CUDA_LIBS@|$(DDPW_CUDA_LIBS)|' worker_template/ddpw.pc.in \
	    >$(DESTDIR)$(LIBDIR)/pkgconfig/ddpw.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/ddpw.pc

# The Debian packages ddprun, ddp-rendezvous and libddpw-dev (debian/): dpkg-buildpackage -us -uc
# -b in a copy of the tree, the .deb files left in $(BUILD)/, checked by lintian
# (scripts/build-deb.sh). `scripts/ensure-deps.sh --deb` installs debhelper and lintian.
DEB_JOBS ?= $(shell nproc)
deb:
	@DEB_JOBS=$(DEB_JOBS) scripts/build-deb.sh $(BUILD)

deps:
	@echo "apt-get install -y $(APT_PACKAGES)"

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

lint:
	scripts/check-license.sh
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability --inline-suppr \
	    -D_GNU_SOURCE $(PUBLIC_INCLUDES) $(RDZV_PRIVATE_INCLUDES) $$(git ls-files '*.c')

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
