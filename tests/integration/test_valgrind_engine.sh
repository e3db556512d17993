#!/usr/bin/env bash
# The single-process engine under valgrind memcheck: the engine unit tests
# (model against the HF goldens, config, safetensors, damaged model
# directories: the error paths are where leaks hide) and tandem-generate
# greedy on both fixture models, which must print the same ids as without
# valgrind. Any invalid read/write, use of uninitialised memory, or
# definitely/indirectly/possibly lost block fails the case
# (--error-exitcode). No suppression file: the runs are clean as they are;
# libgomp's thread pool leaves only "still reachable" blocks, which are not
# errors. Under an ASan build (make test-asan) the cases are skipped:
# valgrind cannot run ASan binaries, and `make test` runs them.
# Prints one TAP line per case.
set -u
BUILD=${TANDEM_BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tandem-valgrind-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/../tap.sh"

VG=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
    --track-origins=yes)

GEN=$BUILD/bin/tandem-generate
if ! command -v valgrind >/dev/null 2>&1; then
    not_ok "valgrind is installed (make deps installs it)"
    echo "1..$T_N"
    exit 1
fi
if [ ! -x "$GEN" ]; then
    not_ok "tandem-generate is built at $GEN"
    echo "1..$T_N"
    exit 1
fi
if ldd "$GEN" | grep -q libasan; then
    ok "valgrind cases # SKIP $BUILD is an ASan build (valgrind cannot run it; make test runs them)"
    echo "1..$T_N"
    exit 0
fi

for t in test_engine_model test_engine_config test_engine_safetensors test_engine_bad_dirs; do
    bin=$BUILD/tests/$t
    if [ ! -x "$bin" ]; then
        not_ok "$t under valgrind: $bin is not built"
        continue
    fi
    CMOCKA_MESSAGE_OUTPUT=TAP timeout 600 "${VG[@]}" "$bin" >"$tmp/$t.out" 2>"$tmp/$t.err"
    rc=$?
    cases=$(grep -cE '^ok ' "$tmp/$t.out")
    if [ "$rc" -eq 0 ] && ! grep -qE '^not ok ' "$tmp/$t.out" && [ "$cases" -gt 0 ]; then
        ok "$t under valgrind: $cases cases pass, no memory errors or leaks"
    else
        not_ok "$t under valgrind (exit $rc)" "$(grep -E '^not ok ' "$tmp/$t.out" | head -5)" \
            "$(grep -E '==[0-9]+==' "$tmp/$t.err" | head -20)"
    fi
done

for f in gpt_oss_tiny qwen3_moe_tiny; do
    args=(--model "tests/fixtures/$f" --prompt-ids 1,2,3,4,5,6,7 --max-tokens 8 --ignore-eos)
    want=$(timeout 120 "$GEN" "${args[@]}" 2>/dev/null)
    got=$(timeout 600 "${VG[@]}" "$GEN" "${args[@]}" 2>"$tmp/gen.err")
    rc=$?
    if [ "$rc" -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
        ok "tandem-generate $f under valgrind: same ids as native ($got), no memory errors or leaks"
    else
        not_ok "tandem-generate $f under valgrind (exit $rc)" "native: $want" "valgrind: $got" \
            "$(grep -E '==[0-9]+==' "$tmp/gen.err" | head -20)"
    fi
done

# A model directory that fails half-way through loading (weights missing).
mkdir -p "$tmp/broken"
cp tests/fixtures/qwen3_moe_tiny/config.json "$tmp/broken/"
timeout 600 "${VG[@]}" "$GEN" --model "$tmp/broken" --prompt-ids 1 --max-tokens 1 >/dev/null 2>"$tmp/broken.err"
rc=$?
if [ "$rc" -eq 1 ] && ! grep -qE '==[0-9]+==' "$tmp/broken.err"; then
    ok "tandem-generate on a model without weights under valgrind: exit 1, no leaks ($(grep -v '==' "$tmp/broken.err" | head -1))"
else
    not_ok "tandem-generate on a model without weights under valgrind (exit $rc, want 1)" \
        "$(head -20 "$tmp/broken.err")"
fi

tap_plan
