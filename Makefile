# qim — top-level commands. The README's quick start is `make run` and `make test`.
#   make run     install Debian packages if missing, build, start qimd on 127.0.0.1:6060 (data in ./var)
#   make test    install, build with gcc and run every test; then the clang ASan+UBSan build, same tests
#   make build   gcc build only (./build)         make san   clang sanitizer build only (./build-san)
#   make bench-store   the storage benchmark (durable message commits/s, group commit vs one
#                message at a time); BENCH_DIR must be on a real disk (default /tmp), never tmpfs
# Suites alone: `ctest --test-dir build -L unit|conformance|e2e|crash|fuzz|contract`.
#   make fuzz-long   every libFuzzer target for FUZZ_SECONDS (600) each, in ./build-san (tests/fuzz/long.sh)
JOBS ?= $(shell nproc)
# Sub-makes run by cmake --build need not announce every directory.
MAKEFLAGS += --no-print-directory
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)

.PHONY: deps build san run test test-gcc test-san fuzz-long clean bench-store
BENCH_DIR ?= /tmp
BENCH_SECONDS ?= 3

deps:
	@./scripts/deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j $(JOBS)

san: deps
	@cmake -S . -B build-san -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DQIM_SANITIZE=ON >/dev/null
	@cmake --build build-san -j $(JOBS)

# qimd creates ./var itself; Ctrl-C (SIGINT) stops it cleanly with status 0.
run: build
	./build/src/qimd --listen 127.0.0.1:6060 --data ./var

test-gcc: build
	@rm -rf build/errlog && mkdir -p build/errlog
	cd build && ctest $(CTEST_FLAGS)

test-san: san
	@rm -rf build-san/errlog && mkdir -p build-san/errlog
	cd build-san && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS)

# Both builds always run, so one failure does not hide the other's results.
test: deps
	@status=0; $(MAKE) test-gcc || status=1; $(MAKE) test-san || status=1; exit $$status

# Long fuzz runs, one target after the other; a summary line per target at the end.
FUZZ_SECONDS ?= 600
fuzz-long: san
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./tests/fuzz/long.sh

bench-store: build
	./build/bench/qim-bench-store $(BENCH_DIR) $(BENCH_SECONDS)

clean:
	rm -rf build build-san
