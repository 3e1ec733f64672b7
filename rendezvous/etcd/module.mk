# SPDX-License-Identifier: Apache-2.0
# rendezvous/etcd/: librdzv_etcd.a, the asynchronous etcd v3 client (rdzv_etcd.h) on a libuv loop
# and the leader election on it (rdzv_etcd_leader.h):
#   rdzv_etcd.c       the client: calls, endpoints, authentication, watches, curl on the loop
#   rdzv_etcd_json.c  base64, request bodies and the checked decoding of replies (pure)
#   rdzv_etcd_curl.c  libcurl.so.4 loaded at run time into a table of functions
#   rdzv_etcd_leader.c leader election on a lease, the fenced write (rdzv_etcd_leader.h)
#   rdzv_etcd_store.c  what a store's candidates share: defaults, the leader key's value
#   rdzv_etcd_records.c a run's records (DONE mark, quarantine): codec, load, fenced writes
#   rdzv_etcd_outage.c  whether etcd answers: a probe after a failed call, two lines an outage
# It depends on common/ alone. libcurl is dlopen'ed (no -lcurl): only <curl/curl.h> is needed to
# build (libcurl4-openssl-dev), and a program that never makes a client runs without libcurl.
ETCD_SRCS := $(addprefix rendezvous/etcd/,rdzv_etcd.c rdzv_etcd_json.c rdzv_etcd_curl.c \
    rdzv_etcd_leader.c rdzv_etcd_store.c rdzv_etcd_records.c rdzv_etcd_outage.c)
$(BUILD)/librdzv_etcd.a: $(call objs,$(ETCD_SRCS))
LIBS += $(BUILD)/librdzv_etcd.a
# Its public header is on every object's path like the other libraries'; its private ones on
# its own objects' and its tests'.
PUBLIC_INCLUDES += -Irendezvous/etcd/include
$(call objs,$(ETCD_SRCS)): CPPFLAGS += -Irendezvous/etcd

# Unit tests (cmocka): base64 and the codec on good, garbage and hostile replies.
UNIT_TESTS += $(BUILD)/tests/unit/test_etcd_codec
$(BUILD)/tests/unit/test_etcd_codec: $(BUILD)/obj/tests/unit/test_etcd_codec.o \
    $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
$(BUILD)/obj/tests/unit/test_etcd_%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/obj/tests/unit/test_etcd_%.o: CPPFLAGS += -Irendezvous/etcd

# One call from the shell against a real etcd (tests/integration/test_etcd_client.sh).
HELPERS += $(BUILD)/tests/etcd_client
$(BUILD)/tests/etcd_client: $(BUILD)/obj/tests/helpers/etcd_client.o $(BUILD)/librdzv_etcd.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
$(BUILD)/obj/tests/helpers/etcd_client.o: CPPFLAGS += -Irendezvous/etcd

# One election candidate per process (tests/integration/test_etcd_leader.sh).
HELPERS += $(BUILD)/tests/etcd_leader
$(BUILD)/tests/etcd_leader: $(BUILD)/obj/tests/helpers/etcd_leader.o $(BUILD)/librdzv_etcd.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
