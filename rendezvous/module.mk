# SPDX-License-Identifier: Apache-2.0
# rendezvous/: the store. librdzv.a (codec, auth, server, client), the ddp-rendezvous daemon,
# its unit tests, integration helpers, benchmark and libFuzzer target.
RDZV_LIB_SRCS := rendezvous/rdzv_frame.c rendezvous/rdzv_auth.c rendezvous/rdzv_server.c \
                 rendezvous/rdzv_client.c rendezvous/rdzv_round.c rendezvous/rdzv_runs.c \
                 rendezvous/rdzv_round_status.c rendezvous/rdzv_round_hosts.c \
                 rendezvous/rdzv_aclient.c rendezvous/rdzv_aclient_queue.c \
                 rendezvous/rdzv_aclient_calls.c \
                 rendezvous/rdzv_acall.c \
                 rendezvous/rdzv_keys.c rendezvous/rdzv_conn.c rendezvous/rdzv_cmds.c \
                 rendezvous/rdzv_server_round.c rendezvous/rdzv_metrics.c \
                 rendezvous/rdzv_server_thread.c rendezvous/rdzv_proto.c rendezvous/rdzv_layout.c
$(BUILD)/librdzv.a: $(call objs,$(RDZV_LIB_SRCS))
LIBS += $(BUILD)/librdzv.a
INSTALL_HEADERS += rendezvous/include/rdzv_client.h rendezvous/include/rdzv_server.h \
    rendezvous/include/rdzv_proto.h rendezvous/include/rdzv_layout.h

BINS += $(BUILD)/ddp-rendezvous
$(BUILD)/ddp-rendezvous: $(BUILD)/obj/rendezvous/main.o $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
	$(LINK)

UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_frame $(BUILD)/tests/unit/test_rdzv_client
$(BUILD)/tests/unit/test_rdzv_frame: $(BUILD)/obj/tests/unit/test_rdzv_frame.o $(BUILD)/librdzv.a \
    $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_rdzv_client: $(BUILD)/obj/tests/unit/test_rdzv_client.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
# The peer-owner lookup is wrapped so that a test can make it fail (owner_only fails closed), and
# setsockopt so that a test can count the store's pushed ACKs.
$(BUILD)/tests/unit/test_rdzv_client: LDFLAGS += -Wl,--wrap=ddp_tcp_peer_owner \
    -Wl,--wrap=setsockopt
UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_round
$(BUILD)/tests/unit/test_rdzv_round: $(BUILD)/obj/tests/unit/test_rdzv_round.o \
    $(BUILD)/obj/rendezvous/rdzv_round.o $(BUILD)/obj/rendezvous/rdzv_runs.o \
    $(BUILD)/obj/rendezvous/rdzv_round_status.o $(BUILD)/obj/rendezvous/rdzv_round_hosts.o \
    $(BUILD)/obj/rendezvous/rdzv_proto.o \
    $(BUILD)/obj/rendezvous/rdzv_layout.o $(BUILD)/obj/rendezvous/rdzv_frame.o \
    $(BUILD)/libddpcommon.a
UNIT_TESTS += $(BUILD)/tests/unit/test_rdzv_aclient $(BUILD)/tests/unit/test_rdzv_acall
$(BUILD)/tests/unit/test_rdzv_aclient: $(BUILD)/obj/tests/unit/test_rdzv_aclient.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
$(BUILD)/tests/unit/test_rdzv_acall: $(BUILD)/obj/tests/unit/test_rdzv_acall.o \
    $(BUILD)/librdzv.a $(BUILD)/libddpcommon.a
$(BUILD)/obj/tests/unit/test_rdzv_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_rdzv_%.o: CPPFLAGS += -Irendezvous

# The store's frame codec (rdzv_frame_int.h), limits and handshake stay private: programs outside
# rendezvous/ use the clients (rdzv_client.h, rdzv_aclient.h) and the rendezvous codec
# (rdzv_proto.h). The store's own benchmarks, test helpers and fuzzers below speak raw frames, so
# they alone get -Irendezvous.
$(BUILD)/obj/bench/bench_floor.o $(BUILD)/obj/bench/rdzv_sim.o $(BUILD)/obj/bench/bench_store.o \
    $(BUILD)/obj/bench/bench_rdzv_scale.o $(BUILD)/obj/tests/helpers/store_hostile.o: \
    CPPFLAGS += -Irendezvous

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
	@$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -Icommon/include -Irendezvous/include -Irendezvous \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    fuzz/fuzz_rdzv_frame.c rendezvous/rdzv_frame.c rendezvous/rdzv_proto.c common/ddp_err.c \
	    common/ddp_buf.c common/ddp_parse.c common/ddp_escape.c -o $(FUZZ_DIR)/fuzz_rdzv_frame
	@for f in tests/data/rdzv/*/input.bin; do \
	    cp "$$f" "$(FUZZ_DIR)/corpus/rdzv_frame/golden-$$(basename $$(dirname $$f))"; done
	@$(call run_fuzzer,rdzv_frame,$(FUZZ_DIR)/corpus/rdzv_frame fuzz/corpus/rdzv_frame)
	@mkdir -p $(FUZZ_DIR)/corpus/rdzv_round
	@echo "  FUZZCC  $(FUZZ_DIR)/fuzz_rdzv_round"
	@$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -Icommon/include -Irendezvous/include -Irendezvous \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    fuzz/fuzz_rdzv_round.c rendezvous/rdzv_round.c rendezvous/rdzv_runs.c rendezvous/rdzv_round_status.c rendezvous/rdzv_round_hosts.c rendezvous/rdzv_proto.c rendezvous/rdzv_frame.c common/ddp_err.c \
	    common/ddp_buf.c common/ddp_parse.c common/ddp_escape.c $(shell $(PKG_CONFIG) --cflags --libs jansson) \
	    -o $(FUZZ_DIR)/fuzz_rdzv_round
	@$(call run_fuzzer,rdzv_round,$(FUZZ_DIR)/corpus/rdzv_round)
