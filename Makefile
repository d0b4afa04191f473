# tandem -- the two quick-start commands:
#   make run    installs missing Debian packages, builds, runs the bundled demo job
#   make test   installs, builds (plus an ASan/UBSan build), runs every test; ends with CTest's summary
# Other targets: make build, make bench, make clean, make test-gpu (tests/gpu; skipped without a GPU).
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: deps build build-asan run test test-fast test-gpu bench clean fuzz

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
	@cd $(BUILD) && ctest --output-on-failure -j 1 -LE gpu

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j 1 -LE gpu

# The GPU tests (tests/gpu): CUDA kernels against the CPU backend, the parity fixtures in fp32 and bf16, training
# runs, compute-sanitizer, 2 ranks on one GPU, NCCL. Need a build with CUDA (nvcc found); skipped without a GPU.
test-gpu: build
	@if ! grep -q "^TANDEM_CUDA:BOOL=ON" $(BUILD)/CMakeCache.txt; then \
		echo "test-gpu: skipped: this build has no CUDA backend (nvcc was not found when it was configured)"; \
	else cd $(BUILD) && ctest --output-on-failure -j 1 -L gpu; fi

bench: build
	./bench/bench_train.sh

# Long fuzzing run of every parser: FUZZ_SECONDS per target (default 600), libFuzzer + ASan/UBSan, built
# with clang into build-fuzz/ (scripts/fuzz.sh; results in docs/reliability.md).
fuzz: deps
	./scripts/fuzz.sh --seconds-per-target $(or $(FUZZ_SECONDS),600)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
