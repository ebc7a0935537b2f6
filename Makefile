# Thin wrapper: scripts/deps.sh + meson + ninja. See README.md.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
PAGE4K_BUILD ?= build-4k
MESON_SETUP = meson setup --reconfigure
# Every make build has the test hooks (failpoints, the power-loss journal):
# the fault-injection suites need them.  Such a build installs nothing (see
# README.md).  A build directory made before the option existed, or without
# it, is reconfigured once to turn it on.
HOOKS = -Dtest_hooks=true
hooks_on = @[ ! -f $(1)/build.ninja ] || grep -q '"name": "test_hooks", "value": true' \
	$(1)/meson-info/intro-buildoptions.json 2>/dev/null || $(MESON_SETUP) $(HOOKS) $(1) >/dev/null

.PHONY: all deps build test asan tsan fuzz demo clean format tidy default page4k

all: build

deps:
	@sh scripts/deps.sh

$(BUILD)/build.ninja:
	@sh scripts/deps.sh
	meson setup -Dwerror=true $(HOOKS) $(BUILD) >/dev/null

build: deps $(BUILD)/build.ninja
	$(call hooks_on,$(BUILD))
	ninja -C $(BUILD)

test: build
	meson test -C $(BUILD) --print-errorlogs --num-processes 2
	$(MAKE) fuzz

# The libFuzzer targets need clang: a second build of the whole tree with it
# (so clang's warnings are errors too), then 10 s per target (300 s with
# WALRUS_LONG=1).
fuzz: deps
	@[ -f $(FUZZ_BUILD)/build.ninja ] || CC=clang meson setup -Dwerror=true $(HOOKS) $(FUZZ_BUILD) -Dfuzz=enabled >/dev/null
	$(call hooks_on,$(FUZZ_BUILD))
	ninja -C $(FUZZ_BUILD)
	meson test -C $(FUZZ_BUILD) --suite fuzz --print-errorlogs --num-processes 2

asan: deps
	@[ -f $(ASAN_BUILD)/build.ninja ] || meson setup -Dwerror=true $(HOOKS) $(ASAN_BUILD) \
		-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug >/dev/null
	$(call hooks_on,$(ASAN_BUILD))
	ninja -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C $(ASAN_BUILD) --print-errorlogs --num-processes 2

# The `threads` suite under ThreadSanitizer: any report fails the test.
# history_size=7: the earlier access of a race must keep its stack, or a
# suppression (tests/tsan.supp) cannot match it ("failed to restore the
# stack" made the WAL writer's partial-page race, suppressed, fail txn).  The
# fuzz targets stay off: their ASan flags do not mix with TSan (CC=clang).
tsan: deps
	@[ -f $(TSAN_BUILD)/build.ninja ] || meson setup -Dwerror=true $(HOOKS) $(TSAN_BUILD) \
		-Db_sanitize=thread -Db_pie=true -Db_lundef=false -Dfuzz=disabled -Dbuildtype=debug >/dev/null
	$(call hooks_on,$(TSAN_BUILD))
	ninja -C $(TSAN_BUILD)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$(CURDIR)/tests/tsan.supp \
		meson test -C $(TSAN_BUILD) --suite threads --print-errorlogs --num-processes 2

# The whole suite again with 4 KiB data pages (-Dpage_size=4096), the
# other page size a build may choose.
page4k: deps
	@[ -f $(PAGE4K_BUILD)/build.ninja ] || meson setup -Dwerror=true $(HOOKS) -Dpage_size=4096 \
		$(PAGE4K_BUILD) >/dev/null
	$(call hooks_on,$(PAGE4K_BUILD))
	ninja -C $(PAGE4K_BUILD)
	meson test -C $(PAGE4K_BUILD) --print-errorlogs --num-processes 2

# The default configuration, as a packager builds it: `meson setup` with no
# option (no test hooks, warnings not errors), then its unit suite.
DEFAULT_BUILD ?= build-default
default: deps
	@[ -f $(DEFAULT_BUILD)/build.ninja ] || meson setup $(DEFAULT_BUILD) >/dev/null
	ninja -C $(DEFAULT_BUILD)
	meson test -C $(DEFAULT_BUILD) --suite unit --print-errorlogs --num-processes 2

demo: build
	@sh scripts/demo.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

tidy: build
	clang-tidy -p $(BUILD) --quiet --checks='-*,bugprone-*,-bugprone-easily-swappable-parameters,-bugprone-reserved-identifier' $$(git ls-files 'src/*.c' 'tools/*.c')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) $(DEFAULT_BUILD) $(PAGE4K_BUILD)
