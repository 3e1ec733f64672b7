# SPDX-License-Identifier: Apache-2.0
# common/: libddpcommon.a, internal helpers every program links (log, errors, buffers, parsing,
# signal names, the visible-device list, address helpers, files made without following links).
COMMON_SRCS := common/ddp_err.c common/ddp_log.c common/ddp_buf.c common/ddp_parse.c common/ddp_strv.c \
    common/ddp_net.c common/ddp_signal.c common/ddp_devices.c \
    common/ddp_addr.c common/ddp_escape.c common/ddp_file.c common/ddp_sockdiag.c common/ddp_proc.c \
    common/ddp_timing.c
$(BUILD)/libddpcommon.a: $(call objs,$(COMMON_SRCS))
LIBS += $(BUILD)/libddpcommon.a

# Unit tests (cmocka) of the pure helpers.
UNIT_TESTS += $(BUILD)/tests/unit/test_common_helpers
$(BUILD)/tests/unit/test_common_helpers: $(BUILD)/obj/tests/unit/test_common_helpers.o \
    $(BUILD)/libddpcommon.a
$(BUILD)/obj/tests/unit/test_common_%.o: CFLAGS += $(CMOCKA_CFLAGS)

UNIT_TESTS += $(BUILD)/tests/unit/test_common_escape
$(BUILD)/tests/unit/test_common_escape: $(BUILD)/obj/tests/unit/test_common_escape.o \
    $(BUILD)/libddpcommon.a

UNIT_TESTS += $(BUILD)/tests/unit/test_common_file
$(BUILD)/tests/unit/test_common_file: $(BUILD)/obj/tests/unit/test_common_file.o \
    $(BUILD)/libddpcommon.a

UNIT_TESTS += $(BUILD)/tests/unit/test_common_sockdiag
$(BUILD)/tests/unit/test_common_sockdiag: $(BUILD)/obj/tests/unit/test_common_sockdiag.o \
    $(BUILD)/libddpcommon.a
