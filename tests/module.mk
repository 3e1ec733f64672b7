# SPDX-License-Identifier: Apache-2.0
# tests/: helper programs the integration suites drive (unit tests are listed by each module).
HELPERS += $(BUILD)/tests/fake_worker
$(BUILD)/tests/fake_worker: $(BUILD)/obj/tests/helpers/fake_worker.o $(BUILD)/libddpcommon.a
	$(LINK)
# A libcuda.so.1 older than the CUDA runtime (test_train.sh: CUDA's error is kept, not "no GPU").
HELPERS += $(BUILD)/tests/old_driver/libcuda.so.1
$(BUILD)/tests/old_driver/libcuda.so.1: $(BUILD)/obj/tests/helpers/fake_libcuda_old.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -o $@ $^
# The fake driver of test_launch_nproc as libcuda.so.1, for ddprun's GPU placement (test_numa.sh).
HELPERS += $(BUILD)/tests/fake_gpus/libcuda.so.1
$(BUILD)/tests/fake_gpus/libcuda.so.1: $(BUILD)/obj/tests/unit/test_launch_fakecuda.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -shared -o $@ $^
