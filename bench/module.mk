# bench/: benchmark programs (make bench runs bench/run.sh, which runs every bench/*.sh).
BENCHES += $(BUILD)/bench/bench_launch
$(BUILD)/bench/bench_launch: $(BUILD)/obj/bench/bench_launch.o
	$(LINK)
BENCHES += $(BUILD)/bench/bench_rdzv_join
$(BUILD)/bench/bench_rdzv_join: $(BUILD)/obj/bench/bench_rdzv_join.o $(BUILD)/librdzv.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
