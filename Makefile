# The two commands of the README: `make demo` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test unit integration bench clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	./scripts/demo.sh

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 300

unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit

integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration

bench: build
	./bench/run.sh

clean:
	rm -rf $(BUILD_DIR)
