# graft: `make serve` and `make test` set everything up first (Debian
# packages, npm packages, the ggml source), then build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build serve test clean format format-check

setup:
	./scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: setup $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

serve: build
	$(BUILD)/bin/graft serve $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

clean:
	rm -rf $(BUILD)

# `make test` runs the same check as its ctest test clang_format.
format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

format-check:
	./scripts/check-format.sh
