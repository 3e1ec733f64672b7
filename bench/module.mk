# SPDX-License-Identifier: Apache-2.0
# bench/: benchmark programs (make bench runs bench/run.sh, which runs every bench/*.sh).
BENCHES += $(BUILD)/bench/bench_launch
$(BUILD)/bench/bench_launch: $(BUILD)/obj/bench/bench_launch.o
	$(LINK)
BENCHES += $(BUILD)/bench/bench_rdzv_join
$(BUILD)/bench/bench_rdzv_join: $(BUILD)/obj/bench/bench_rdzv_join.o $(BUILD)/obj/bench/rdzv_sim.o \
    $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
	$(LINK)
# bench_rdzv_scale: every rendezvous path at 1,000-16,000 simulated agents (make bench-scale).
BENCHES += $(BUILD)/bench/bench_rdzv_scale
$(BUILD)/bench/bench_rdzv_scale: $(BUILD)/obj/bench/bench_rdzv_scale.o \
    $(BUILD)/obj/bench/rdzv_sim.o $(BUILD)/librdzv.a $(BUILD)/librdzv_etcd.a $(BUILD)/libddpcommon.a
	$(LINK)
# bench_heartbeat uses libddpw's heartbeat test hooks (ddpw_int.h) to turn the rate limit off.
BENCHES += $(BUILD)/bench/bench_heartbeat
$(BUILD)/bench/bench_heartbeat: $(BUILD)/obj/bench/bench_heartbeat.o $(BUILD)/libddpw.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
$(BUILD)/obj/bench/bench_heartbeat.o: CPPFLAGS += -Iworker_template
# bench_timing: what the collective timing (ddpw_timing_add and its clock reads) adds per step.
BENCHES += $(BUILD)/bench/bench_timing
$(BUILD)/bench/bench_timing: $(BUILD)/obj/bench/bench_timing.o $(BUILD)/libddpw.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
$(BUILD)/obj/bench/bench_timing.o: CPPFLAGS += -Iworker_template
# bench_beat_worker: the worker of bench/hang.sh (hang detection latency and the agent's cost).
BENCHES += $(BUILD)/bench/bench_beat_worker
$(BUILD)/bench/bench_beat_worker: $(BUILD)/obj/bench/bench_beat_worker.o
	$(LINK)
# bench_gpu: CUDA's device count and the cuBLAS SGEMM roof of train's MLP shapes (make gpu-check).
BENCHES += $(BUILD)/bench/bench_gpu
$(BUILD)/bench/bench_gpu: EXTRA_LIBS += $(CUDA_LIBS)
$(BUILD)/bench/bench_gpu: $(BUILD)/obj/bench/bench_gpu.o
	$(LINK)
# bench_etcd_elect: the etcd backend's election with N simulated candidates (make bench-scale).
BENCHES += $(BUILD)/bench/bench_etcd_elect
$(BUILD)/bench/bench_etcd_elect: $(BUILD)/obj/bench/bench_etcd_elect.o $(BUILD)/librdzv_etcd.a \
    $(BUILD)/libddpcommon.a
	$(LINK)
