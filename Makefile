# attnd — build, test and run. See README.md.
#
#   make            library, daemon, load generator
#   make run        start attnd on the built-in demo model at 127.0.0.1:8080
#   make test       build and run every test (installs missing Debian packages), among them
#                   allocation-failure injection (test_alloc_fail) and the fuzz corpora replay
#   make sanitize   the same tests on an ASan+UBSan build (in build-san/)
#   make valgrind   memcheck over the library/codec tests and the daemon under integration tests
#   make bench      benchmarks: figures and ratios measured in one run (installs missing
#                   packages first, like make test; bench-only skips that)
#   make fuzz       fuzz the safetensors loader, the request codec and whole HTTP requests
#                   (FUZZ_SECONDS=60 each; make test replays every corpus)
#   make soak       10 min of mixed traffic, SIGHUPs, disconnects and overload, then RSS,
#                   threads, fds and answers checked (SOAK_SECONDS=600; not in make test)
#
# Sources are found by wildcard, so adding a module needs no Makefile edit:
#   lib/*.c                    -> $(BUILD)/libattn.a        (the attention core)
#   server/*/*.c               -> $(BUILD)/libattnd.a       (daemon modules, by layer folder)
#   server/main.c              -> $(BUILD)/attnd
#   tools/load/*.c but main.c  -> $(BUILD)/libattndload.a   (load generator modules)
#   tools/load/main.c          -> $(BUILD)/attnd-load
#   tests/common/*.c           -> $(BUILD)/libtestcommon.a  (test helpers)
#   tests/unit/test_*.c        -> $(BUILD)/tests/unit/test_*        (one binary each)
#   tests/integration/test_*.c -> $(BUILD)/tests/integration/test_*
#   tests/bench/bench_*.c      -> $(BUILD)/bench/bench_*
# BUILD can be overridden (make BUILD=build-x) so parallel builds never collide.

BUILD    ?= build
CC       ?= gcc
SANITIZE ?= 0
PREFIX   ?= /usr/local

PKGS     := openblas jansson libmicrohttpd libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT      ?= -O2
WARN     := -std=c11 -Wall -Wextra -Wpedantic -Werror
CPPFLAGS += -D_GNU_SOURCE -Ilib -Iserver -Itools/load -Itests/common
CFLAGS   += $(WARN) $(OPT) -g -pthread -MMD -MP $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lm -pthread

# assert() states invariants ("cannot happen: we were suspended"): checked in the
# sanitizer build (make sanitize, in CI); release builds compile them out and keep
# the defensive code beside each one.
ifeq ($(SANITIZE),1)
OPT      := -O1
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
else
CPPFLAGS += -DNDEBUG
endif

LIB_SRC     := $(wildcard lib/*.c)
SERVER_SRC  := $(wildcard server/*/*.c)
LOAD_SRC    := $(filter-out tools/load/main.c,$(wildcard tools/load/*.c))
COMMON_SRC  := $(wildcard tests/common/*.c)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
ITEST_SRC   := $(wildcard tests/integration/test_*.c)
BENCH_SRC   := $(wildcard tests/bench/bench_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBATTN     := $(BUILD)/libattn.a
LIBATTND    := $(BUILD)/libattnd.a
LIBLOAD     := $(BUILD)/libattndload.a
LIBCOMMON   := $(BUILD)/libtestcommon.a
ATTND       := $(BUILD)/attnd
ATTND_LOAD  := $(BUILD)/attnd-load
UNIT_BINS   := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
ITEST_BINS  := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(ITEST_SRC))
BENCH_BINS  := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

# Everything a test binary may need, in link order.
TEST_LIBS   := $(LIBCOMMON) $(LIBLOAD) $(LIBATTND) $(LIBATTN)

.PHONY: all deps run test test-only sanitize valgrind valgrind-only bench bench-only loadtest fuzz soak clean install docker-test
.DEFAULT_GOAL := all

all: $(ATTND) $(ATTND_LOAD)

# Installs missing Debian packages (as root, via apt-get). Fast when all present.
deps:
	@scripts/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIBATTN): $(call obj,$(LIB_SRC))
$(LIBATTND): $(call obj,$(SERVER_SRC))
$(LIBLOAD): $(call obj,$(LOAD_SRC))
$(LIBCOMMON): $(call obj,$(COMMON_SRC))
$(LIBATTN) $(LIBATTND) $(LIBLOAD) $(LIBCOMMON):
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^ $(if $^,,$(BUILD)/obj/empty.o)

# An archive with no members still needs one object; this keeps empty dirs building.
$(BUILD)/obj/empty.o:
	@mkdir -p $(dir $@)
	echo 'typedef int attn_empty_translation_unit;' | $(CC) $(CFLAGS) -x c -c - -o $@
$(LIBATTN) $(LIBATTND) $(LIBLOAD) $(LIBCOMMON): | $(BUILD)/obj/empty.o

$(ATTND): $(call obj,server/main.c) $(LIBATTND) $(LIBATTN)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(ATTND_LOAD): $(call obj,tools/load/main.c) $(LIBLOAD)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/unit/%: $(call obj,tests/unit/%.c) $(TEST_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# Allocation-failure injection: every malloc family call of lib/, server/ and
# the test goes through the test's own wrappers (tests/unit/test_alloc_fail.c).
ALLOC_WRAP  := malloc calloc realloc free strdup strndup aligned_alloc
$(BUILD)/tests/unit/test_alloc_fail: LDFLAGS += $(foreach f,$(ALLOC_WRAP),-Wl,--wrap=$(f))
# The wrappers keep state that malloc/free read: GCC must not assume they don't.
$(BUILD)/obj/tests/unit/test_alloc_fail.o: CFLAGS += -fno-builtin

$(BUILD)/tests/integration/%: $(call obj,tests/integration/%.c) $(TEST_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/bench/%: $(call obj,tests/bench/%.c) $(TEST_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

run: deps
	@$(MAKE) --no-print-directory all
	$(ATTND) --config config/attnd.json --listen 127.0.0.1:8080

# test: install deps, build everything, run the whole suite (tests/run.sh prints
# one line per test and a closing "N passed, N failed").
test: deps
	@$(MAKE) --no-print-directory test-only

test-only: all $(UNIT_BINS) $(ITEST_BINS)
	BUILD=$(BUILD) tests/run.sh

sanitize: deps
	@$(MAKE) --no-print-directory BUILD=build-san SANITIZE=1 test-only

valgrind: deps
	@$(MAKE) --no-print-directory valgrind-only

valgrind-only: all $(UNIT_BINS) $(ITEST_BINS)
	BUILD=$(BUILD) scripts/valgrind.sh

# bench: like test, installs the packages first: the compiler flags come from
# pkg-config, which the Makefile reads when it starts.
bench:
	@scripts/deps.sh --bench
	@$(MAKE) --no-print-directory bench-only

bench-only: all $(BENCH_BINS)
	BUILD=$(BUILD) scripts/bench.sh

# loadtest: start attnd on the demo model, run a short sweep, leave JSON/CSV/SVG in results/.
loadtest: deps all
	BUILD=$(BUILD) scripts/loadtest.sh

FUZZ_SECONDS ?= 60

# fuzz: build the tests/fuzz targets with clang + libFuzzer + ASan/UBSan into build-fuzz/ and
# run each for FUZZ_SECONDS; fails (input saved in tests/fuzz/regressions/) on a crash or leak.
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

SOAK_SECONDS ?= 600

# soak: attnd under SOAK_SECONDS of v1/v2/session traffic, SIGHUPs, client
# disconnects and overload bursts; then RSS, threads and fds back near the
# start and every replayed answer equal to its single-request answer (summary
# table; exit 1 on a failed check). Not part of make test or CI.
soak: deps all
	BUILD=$(BUILD) SOAK_SECONDS=$(SOAK_SECONDS) scripts/soak.sh

# docker-test: build and run the image and the compose stack with podman (see docker/).
docker-test:
	scripts/docker-test.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(ATTND) $(ATTND_LOAD) $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build build-san build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
