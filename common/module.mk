# common/: libddpcommon.a, internal helpers every program links (log, errors, buffers, parsing).
COMMON_SRCS := common/ddp_err.c common/ddp_log.c common/ddp_buf.c common/ddp_parse.c common/ddp_strv.c \
    common/ddp_net.c
$(BUILD)/libddpcommon.a: $(call objs,$(COMMON_SRCS))
LIBS += $(BUILD)/libddpcommon.a
