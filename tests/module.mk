# tests/: helper programs the integration suites drive (unit tests are listed by each module).
HELPERS += $(BUILD)/tests/fake_worker
$(BUILD)/tests/fake_worker: $(BUILD)/obj/tests/helpers/fake_worker.o $(BUILD)/libddpcommon.a
	$(LINK)
