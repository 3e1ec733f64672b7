# bench/: benchmark programs (make bench runs bench/run.sh, which runs every bench/*.sh).
BENCHES += $(BUILD)/bench/bench_launch
$(BUILD)/bench/bench_launch: $(BUILD)/obj/bench/bench_launch.o
	$(LINK)
