# tandem -- the two quick-start commands:
#   make run    installs missing Debian packages, builds, runs the bundled demo job
#   make test   installs, builds (plus an ASan/UBSan build), runs every test; ends with CTest's summary
# Other targets: make build, make bench, make clean.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: deps build build-asan run test test-fast bench clean fuzz

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTANDEM_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

run: build
	$(BUILD)/tandem train examples/demo_addition.yaml

# The Release build runs every test; the sanitizer build runs the parity and unit tests again
# (ASan + UBSan, halt on the first report).
test: build build-asan
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		ctest --output-on-failure -j 1 -R '^test_(unit|parity)_'
	@cd $(BUILD) && ctest --output-on-failure -j 1

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

bench: build
	./bench/bench_train.sh

# Long fuzzing run of every parser: FUZZ_SECONDS per target (default 600), libFuzzer + ASan/UBSan, built
# with clang into build-fuzz/ (scripts/fuzz.sh; results in docs/reliability.md).
fuzz: deps
	./scripts/fuzz.sh --seconds-per-target $(or $(FUZZ_SECONDS),600)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
