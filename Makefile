# The two commands of the README, and a few conveniences. Everything else is CMake (CMakeLists.txt).
BUILD ?= build

.PHONY: all setup configure build test run clean

all: build

setup:
	@scripts/setup

configure: setup
	@scripts/configure $(BUILD)

build: configure
	@cmake --build $(BUILD)

# Set-up, build, and every CPU test.
test: build
	@cd $(BUILD) && ctest -L cpu --output-on-failure --timeout 600

# The main job on the embedded default.
run: build
	@$(BUILD)/bin/cpt run

clean:
	rm -rf $(BUILD)
