# qim — top-level commands. The README's quick start is `make run` and `make test`.
#   make run     install Debian packages if missing, build, start qimd on 127.0.0.1:6060 (data in ./var)
#   make test    install, build with gcc and run every test; then the clang ASan+UBSan build, same tests
#   make release-check  the release gate on the last `make test`'s evidence (docs/release.md;
#                BRANCH=main|store-redis|store-scylla, MAIN_REF=main)
#   make build   gcc build only (./build)         make san   clang sanitizer build only (./build-san)
#   make bench-store   the storage benchmark (durable message commits/s, group commit vs one
#                message at a time); BENCH_DIR must be on a real disk (default /tmp), never tmpfs
#   make bench-commit  sends/s through the full commit on SQLite, concurrent senders, then with
#                10% duplicate retries (bench/commit.c; BENCH_ARGS e.g. "--senders 16")
#   make bench   every benchmark of bench/README.md; rewrites BENCHMARKS.md (bench/run.sh;
#                BENCH_ARGS=--quick for a fast check of the harness)
#   make bench-fanout  the materialization benchmark (mailbox entries/s for a 1,000-member group,
#                BENCH_MESSAGES messages per layout, default 200); BENCH_DIR as above
#   make bench-peers  qim beside ejabberd, Prosody (XMPP, SQLite) and Tinode's PostgreSQL path, same
#                scenario, disk and tmpfs runs (< 20 min; installs its Debian and npm packages); rewrites
#                the peers block of BENCHMARKS.md (bench/peers/run.sh; BENCH_ARGS=--quick for a fast check)
#   make bench-history  p50/p99 of a 50-message history page from a 1,000,000-message conversation
#                (bench/history.c; BENCH_DIR on a real disk; HISTORY_BENCH_ARGS e.g. "--strict")
# Suites alone: `ctest --test-dir build -L unit|conformance|e2e|crash|fuzz|contract`.
#   make fuzz-long   every libFuzzer target for FUZZ_SECONDS (600) each, in ./build-san (tests/fuzz/long.sh)
#   make crash-long  CRASH_KILLS (20) SIGKILLs of qimd under load, then the store check (tests/crash/)
JOBS ?= $(shell nproc)
# Sub-makes run by cmake --build need not announce every directory.
MAKEFLAGS += --no-print-directory
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)

.PHONY: deps build san run test test-gcc test-san release-check fuzz-long crash-long clean bench bench-store bench-commit bench-fanout bench-history bench-peers
BENCH_DIR ?= /tmp
BENCH_SECONDS ?= 3
BENCH_MESSAGES ?= 200

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
	@scripts/test-evidence.sh build
	cd build && ctest $(CTEST_FLAGS) --output-junit junit.xml

test-san: san
	@rm -rf build-san/errlog && mkdir -p build-san/errlog
	@scripts/test-evidence.sh build-san
	cd build-san && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS) --output-junit junit.xml

# Both builds always run, so one failure does not hide the other's results.
test: deps
	@status=0; $(MAKE) test-gcc || status=1; $(MAKE) test-san || status=1; exit $$status

# The release gate (docs/release.md) on the evidence the last `make test` left in both
# builds: refuses a dirty tree, a commit that does not contain MAIN_REF, and any suite
# BRANCH requires that is missing, failed or skipped.
BRANCH ?= main
MAIN_REF ?= main
release-check: build
	./build/tools/qim-release --branch $(BRANCH) --main $(MAIN_REF) gcc=build san=build-san

bench: build
	BENCH_DIR=$(BENCH_DIR) bench/run.sh $(BENCH_ARGS)

# Long fuzz runs, one target after the other; a summary line per target at the end.
FUZZ_SECONDS ?= 600
fuzz-long: san
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./tests/fuzz/long.sh

# Crash consistency under load, long form: the ctest crash_load_sigkill_5 with more kills.
CRASH_KILLS ?= 20
crash-long: build
	@test -d tests/e2e/node_modules || node tests/e2e/lib/npm_ci.js
	node tests/crash/crash_load.js --qimd ./build/src/qimd \
	  --checker ./build/tests/crash/qim-crash-check --kills $(CRASH_KILLS) $(CRASH_ARGS)

bench-store: build
	./build/bench/qim-bench-store $(BENCH_DIR) $(BENCH_SECONDS)

bench-commit: build
	TMPDIR=$(BENCH_DIR) ./build/bench/qim-bench-commit $(BENCH_ARGS)

bench-fanout: build
	./build/bench/qim-bench-fanout $(BENCH_DIR) $(BENCH_MESSAGES)

bench-peers: build
	BENCH_DIR=$(BENCH_DIR) bench/peers/run.sh $(BENCH_ARGS)

bench-history: build
	./build/bench/qim-bench-history $(BENCH_DIR) $(HISTORY_BENCH_ARGS)

clean:
	rm -rf build build-san
