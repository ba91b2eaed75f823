# The two commands of the README: `make demo` and `make test`.
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
# What the unit tests run or load (not the integration tests or benches).
ASAN_TARGETS ?= unit_tests argus-agent argusctl argus-sim nccl_shim cuda_shim
# Tests that dlclose the simulator's emulated libcuda/libnccl, whose process-lifetime
# tables (streams, modules, communicators) then look leaked: run without the leak check.
ASAN_NO_LEAK_CHECK = ^Sim(Gpu|Shim)Test\.
FUZZ_SECONDS ?= 300
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo demo-build test unit integration fuzz asan bench clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# `make demo` builds only what scripts/demo.sh runs: the agent, argusctl, the
# simulator and its shim libraries, and libargus-cupti.so where CMake found the
# CUPTI headers (the target exists only then). No tests, benches or fuzzers, and
# no PyPI venvs (torch is ~5 GB; only the Python-layer tests use them).
DEMO_TARGETS ?= argus-agent argusctl argus-sim nccl_shim cuda_shim
demo-build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(DEMO_TARGETS) \
	  $$(cmake --build $(BUILD_DIR) --target help | grep -qx '\.\.\. argus-cupti' && echo argus-cupti)

demo:
	ARGUS_SKIP_PYPI=1 ./scripts/install-deps.sh
	$(MAKE) demo-build
	./scripts/demo.sh

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 300

unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit

integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration

# Each libFuzzer target (fuzz/) for FUZZ_SECONDS; `make test` runs them a few seconds each.
fuzz: build
	@test -f $(BUILD_DIR)/fuzzers/targets.txt || { echo "fuzz: no fuzz build (ARGUS_FUZZ=OFF: clang-14 with libFuzzer not found)"; exit 1; }
	@set -e; for t in $$(cat $(BUILD_DIR)/fuzzers/targets.txt); do \
	  echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  ./fuzz/run.sh $(BUILD_DIR)/fuzzers/fuzz_$$t fuzz/corpus/$$t $(BUILD_DIR)/fuzz-work/$$t $(FUZZ_SECONDS); \
	done

# The unit tests built with ASan + UBSan (.ci/run runs this after `make test`).
# -O1 with line tables only: the sanitizers need no more, and this build took
# 11.5 min on 2 cores against ~17-20 min at the default -O2 -g.
ASAN_OPT_FLAGS ?= -O1 -g1
asan: deps
	cmake -S . -B $(ASAN_DIR) -DARGUS_SANITIZE=ON -DARGUS_FUZZ=OFF -DCMAKE_BUILD_TYPE=None \
	  -DCMAKE_C_FLAGS="$(ASAN_OPT_FLAGS)" -DCMAKE_CXX_FLAGS="$(ASAN_OPT_FLAGS)" $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j $(JOBS) --target $(ASAN_TARGETS)
	cd $(ASAN_DIR) && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
	  ctest --output-on-failure --timeout 300 -L unit -E '$(ASAN_NO_LEAK_CHECK)'
	cd $(ASAN_DIR) && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0 \
	  ctest --output-on-failure --timeout 300 -L unit -R '$(ASAN_NO_LEAK_CHECK)'

bench: build
	./bench/run.sh

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
