# libFuzzer targets, included by the Makefile.
#
#   tests/fuzz/fuzz_NAME.c   -> build-fuzz/fuzz/fuzz_NAME (seed corpus in
#                               tests/fuzz/corpus/NAME/, optional
#                               dictionary tests/fuzz/NAME.dict)
#   other tests/fuzz/*.c     -> helpers linked into every target
#
# The whole library is rebuilt with clang into build-fuzz/ (separate from
# build/ and build-asan/) with coverage instrumentation plus ASan and UBSan,
# so a memory error or undefined behaviour anywhere on the path is a crash.
# `make fuzz` runs every target for FUZZ_SECONDS (default 60) seconds and
# fails when one crashes, leaks, times out or violates a checked property;
# FUZZ_TARGETS=name,... picks a subset.
FUZZ_BUILD      ?= build-fuzz
FUZZ_SECONDS    ?= 60
FUZZ_CC         ?= clang
FUZZ_SRC        := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_HELPER_SRC := $(filter-out tests/fuzz/fuzz_%.c,$(wildcard tests/fuzz/*.c))
FUZZ_NAMES      := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
FUZZ_SANITIZE   := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                   -fno-omit-frame-pointer

.PHONY: fuzz fuzz-build fuzz-bins
fuzz: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run_fuzz.sh $(FUZZ_NAMES)

fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 SANITIZE="$(FUZZ_SANITIZE)" fuzz-bins

fuzz-bins: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_NAMES))

$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o \
                      $(patsubst %.c,$(BUILD)/obj/%.o,$(FUZZ_HELPER_SRC)) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $^ $(LDLIBS) -o $@
