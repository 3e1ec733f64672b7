# SPDX-License-Identifier: Apache-2.0
# rendezvous/: the store, in four parts, each with its public headers in include/ and its private
# ones beside its sources (docs/ARCHITECTURE.md, "The rendezvous store"):
#   protocol/  what the server and the clients agree on: the frame codec, the limits, the
# \
    handshake and tokens, the rendezvous commands' codec, the key layout
#   round/ \
    the round machine: rendezvous runs as pure logic (no I/O), fed decoded requests
#   server/    the store served on a libuv loop (connections, keys, commands, metrics) and the
# \
    ddp-rendezvous daemon (main.c; rdzv_daemon_etcd.c: its --etcd election, linked with
# librdzv_etcd.a into the daemon alone)
#   client/    the blocking client, the libuv client and the typed round calls over it
# Arrows run one way: protocol <- round <- server, protocol <- client. One archive, librdzv.a,
# holds them all.
RDZV_PROTOCOL_SRCS := $(addprefix rendezvous/protocol/,rdzv_frame.c rdzv_auth.c rdzv_proto.c \
    rdzv_layout.c)
RDZV_ROUND_SRCS := $(addprefix rendezvous/round/,rdzv_round.c rdzv_round_table.c \
    rdzv_round_steps.c rdzv_runs.c rdzv_round_status.c rdzv_round_hosts.c \
    rdzv_straggler.c)
RDZV_SERVER_SRCS := $(addprefix rendezvous/server/,rdzv_server.c rdzv_accept.c rdzv_conn.c \
    rdzv_cmds.c rdzv_keys.c rdzv_server_round.c rdzv_server_log.c rdzv_metrics.c \
    rdzv_server_thread.c)
RDZV_CLIENT_SRCS := $(addprefix rendezvous/client/,rdzv_blocking_client.c rdzv_async_client.c \
    rdzv_async_queue.c rdzv_async_store_calls.c rdzv_round_calls.c)
RDZV_LIB_SRCS := $(RDZV_PROTOCOL_SRCS) $(RDZV_ROUND_SRCS) $(RDZV_SERVER_SRCS) $(RDZV_CLIENT_SRCS)
$(BUILD)/librdzv.a: $(call objs,$(RDZV_LIB_SRCS))
LIBS += $(BUILD)/librdzv.a
INSTALL_HEADERS += rendezvous/client/include/rdzv_client.h rendezvous/server/include/rdzv_server.h \
    rendezvous/protocol/include/rdzv_proto.h rendezvous/protocol/include/rdzv_commands.h \
    rendezvous/protocol/include/rdzv_layout.h rendezvous/protocol/include/rdzv_token.h

# Each part's objects see its own private headers; round/, server/ and client/ also see
# protocol/'s (the frame codec, limits and handshake are the store's wire, private to
# rendezvous/), and the server sees the round machine's interface.
$(call objs,$(RDZV_PROTOCOL_SRCS)): CPPFLAGS += -Irendezvous/protocol
$(call objs,$(RDZV_ROUND_SRCS)): CPPFLAGS += -Irendezvous/round -Irendezvous/round/include \
    -Irendezvous/protocol
$(call objs,$(RDZV_SERVER_SRCS) rendezvous/server/main.c rendezvous/server/rdzv_daemon_etcd.c): CPPFLAGS += -Irendezvous/server \
    -Irendezvous/round/include -Irendezvous/protocol
$(call objs,$(RDZV_CLIENT_SRCS)): CPPFLAGS += -Irendezvous/client -Irendezvous/protocol
# The store's own tests, benchmarks and fuzzers speak raw frames and drive the round machine.
RDZV_PRIVATE_INCLUDES := -Irendezvous/protocol -Irendezvous/round -Irendezvous/round/include \
    -Irendezvous/server -Irendezvous/client

BINS += $(BUILD)/ddp-rendezvous
$(BUILD)/ddp-rendezvous: $(BUILD)/obj/rendezvous/server/main.o \
    $(BUILD)/obj/rendezvous/server/rdzv_daemon_etcd.o $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a \
    $(BUILD)/libddpcommon.a
	$(LINK)

UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_frame
$(BUILD)/tests/unit/test_rdzv_frame: $(BUILD)/obj/tests/unit/test_rdzv_frame.o $(BUILD)/librdzv.a \
    $(BUILD)/libddpcommon.a
# The blocking client against the store, by area (store_client_fixture.h is their fixture).
RDZV_CLIENT_TESTS := test_rdzv_client test_rdzv_client_auth test_rdzv_client_queues \
    test_rdzv_client_limits test_rdzv_client_wstore
UNIT_TESTS += $(addprefix $(BUILD)/tests/unit/,$(RDZV_CLIENT_TESTS))
$(addprefix $(BUILD)/tests/unit/,$(RDZV_CLIENT_TESTS)): $(BUILD)/tests/unit/%: \
    $(BUILD)/obj/tests/unit/%.o $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
# setsockopt is wrapped so that a test can count the store's pushed ACKs, and the peer-owner
# lookup so that a test can make it fail (owner_only fails closed).
$(BUILD)/tests/unit/test_rdzv_client_limits: LDFLAGS += -Wl,--wrap=setsockopt
$(BUILD)/tests/unit/test_rdzv_client_wstore: LDFLAGS += -Wl,--wrap=ddp_tcp_peer_owner
# The round machine's tests link its objects alone (and the protocol's codec): rounds and restarts,
# membership and spares, hosts and status, the wire, and the phase x event table cell by cell.
RDZV_ROUND_TESTS := $(addprefix $(BUILD)/tests/unit/,test_rdzv_round test_rdzv_round_members \
    test_rdzv_round_hosts test_rdzv_round_wire test_rdzv_round_table test_rdzv_straggler)
UNIT_TESTS += $(RDZV_ROUND_TESTS)
$(RDZV_ROUND_TESTS): $(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o \
    $(call objs,$(RDZV_ROUND_SRCS)) $(BUILD)/obj/rendezvous/protocol/rdzv_proto.o \
    $(BUILD)/obj/rendezvous/protocol/rdzv_layout.o $(BUILD)/obj/rendezvous/protocol/rdzv_frame.o \
    $(BUILD)/libddpcommon.a
# The registry of rendezvous commands against its codec and docs/protocol-rdzv.md.
UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_commands
$(BUILD)/tests/unit/test_rdzv_commands: $(BUILD)/obj/tests/unit/test_rdzv_commands.o \
    $(BUILD)/obj/rendezvous/protocol/rdzv_proto.o $(BUILD)/obj/rendezvous/protocol/rdzv_frame.o \
    $(BUILD)/libddpcommon.a
UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_async_client $(BUILD)/tests/unit/test_rdzv_round_calls
$(BUILD)/tests/unit/test_rdzv_async_client: $(BUILD)/obj/tests/unit/test_rdzv_async_client.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_rdzv_round_calls: $(BUILD)/obj/tests/unit/test_rdzv_round_calls.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
$(BUILD)/obj/tests/unit/test_rdzv_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_rdzv_%.o: CPPFLAGS += $(RDZV_PRIVATE_INCLUDES)

# The store's frame codec (rdzv_frame_int.h), limits and handshake stay private: programs outside
# rendezvous/ use the clients (rdzv_client.h, rdzv_async_client.h) and the rendezvous codec
# (rdzv_proto.h). The store's own benchmarks, test helpers and fuzzers below speak raw frames, so
# they alone get its private headers.
$(BUILD)/obj/bench/bench_floor.o $(BUILD)/obj/bench/rdzv_sim.o $(BUILD)/obj/bench/bench_store.o \
    $(BUILD)/obj/bench/bench_rdzv_scale.o $(BUILD)/obj/tests/helpers/store_hostile.o: \
    CPPFLAGS += $(RDZV_PRIVATE_INCLUDES)

# Integration helpers (tests/integration/test_store.sh drives them).
STORE_HELPERS := store_client store_hostile store_swarm
HELPERS += $(addprefix $(BUILD)/tests/,$(STORE_HELPERS))
$(addprefix $(BUILD)/tests/,$(STORE_HELPERS)): $(BUILD)/tests/%: $(BUILD)/obj/tests/helpers/%.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
	$(LINK)

BENCHES += $(BUILD)/bench/bench_store
$(BUILD)/bench/bench_store: $(BUILD)/obj/bench/bench_store.o $(BUILD)/librdzv.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
# The kernel's floor for bench_store's throughput workload (canned replies, no store).
BENCHES += $(BUILD)/bench/bench_floor
$(BUILD)/bench/bench_floor: $(BUILD)/obj/bench/bench_floor.o
	$(LINK)

# make fuzz [FUZZ_SECONDS=60]: libFuzzer on the frame parser (clang, ASan+UBSan) in build-fuzz/,
# seeded from fuzz/corpus/rdzv_frame and the golden frames; new inputs stay in build-fuzz/.
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_DIR ?= build-fuzz
# run_fuzzer NAME CORPUS: runs build-fuzz/fuzz_NAME for FUZZ_SECONDS with its progress in a log;
# prints the final counts, or the log's end and fails on a crash.
run_fuzzer = echo "  FUZZ    $(1) for $(FUZZ_SECONDS) s (log: $(FUZZ_DIR)/fuzz_$(1).log)" && \
    if $(FUZZ_DIR)/fuzz_$(1) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
        -artifact_prefix=$(FUZZ_DIR)/artifacts/ $(2) > $(FUZZ_DIR)/fuzz_$(1).log 2>&1; then \
        grep -E '^(Done|stat::number_of_executed_units)' $(FUZZ_DIR)/fuzz_$(1).log; \
    else tail -40 $(FUZZ_DIR)/fuzz_$(1).log; exit 1; fi

fuzz:
	@mkdir -p $(FUZZ_DIR)/corpus/rdzv_frame $(FUZZ_DIR)/artifacts/
	@echo "  FUZZCC  $(FUZZ_DIR)/fuzz_rdzv_frame"
	@$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -Icommon/include $(RDZV_PUBLIC_INCLUDES) $(RDZV_PRIVATE_INCLUDES) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    fuzz/fuzz_rdzv_frame.c rendezvous/protocol/rdzv_frame.c rendezvous/protocol/rdzv_proto.c common/ddp_err.c \
	    common/ddp_buf.c common/ddp_parse.c common/ddp_escape.c -o $(FUZZ_DIR)/fuzz_rdzv_frame
	@for f in tests/data/rdzv/*/input.bin; do \
	    cp "$$f" "$(FUZZ_DIR)/corpus/rdzv_frame/golden-$$(basename $$(dirname $$f))"; done
	@$(call run_fuzzer,rdzv_frame,$(FUZZ_DIR)/corpus/rdzv_frame fuzz/corpus/rdzv_frame)
	@mkdir -p $(FUZZ_DIR)/corpus/rdzv_round
	@echo "  FUZZCC  $(FUZZ_DIR)/fuzz_rdzv_round"
	@$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -Icommon/include $(RDZV_PUBLIC_INCLUDES) $(RDZV_PRIVATE_INCLUDES) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    fuzz/fuzz_rdzv_round.c $(RDZV_ROUND_SRCS) rendezvous/protocol/rdzv_proto.c \
	    rendezvous/protocol/rdzv_frame.c common/ddp_err.c \
	    common/ddp_buf.c common/ddp_parse.c common/ddp_escape.c $(shell $(PKG_CONFIG) --cflags --libs jansson) \
	    -o $(FUZZ_DIR)/fuzz_rdzv_round
	@$(call run_fuzzer,rdzv_round,$(FUZZ_DIR)/corpus/rdzv_round)
