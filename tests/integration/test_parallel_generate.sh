#!/usr/bin/env bash
# tandem-parallel-generate across real processes: TP(+EP) and DP+EP layouts
# must reproduce HF's golden greedy tokens (and tandem-generate's tokens for
# a second prompt), whether the process forks its ranks or an orchestrator
# starts them with --rank/--world/--comm-name; a rank killed with SIGKILL
# makes the others exit 1 naming the dead rank instead of hanging; bad
# layouts are refused; no shared-memory segment is left behind.
# Prints one TAP line per case.
set -u
BUILD=${TANDEM_BUILD:-build}
PGEN=$BUILD/bin/tandem-parallel-generate
GEN=$BUILD/bin/tandem-generate
. "$(dirname "$0")/../tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tandem-pgen-XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# fail NAME [LOG...]: not_ok with the first 20 lines of each log that exists
fail() {
    local name=$1 f diags=()
    shift
    for f in "$@"; do [ -f "$f" ] && diags+=("$(head -20 "$f")"); done
    not_ok "$name" "${diags[@]}"
}

golden_ids() {
    python3 - "$1/golden.safetensors" "$2" <<'EOF'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])[sys.argv[2]]
b, e = entry["data_offsets"]
raw = data[8 + n + b:8 + n + e]
print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
EOF
}

# Waits (bounded) for a line matching $2 in file $1.
wait_for_line() {
    for _ in $(seq 1 3000); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    return 1
}

name_base="pgt-$$"
OTHER=5,17,99,3,250,7,1,42

for fix in tests/fixtures/gpt_oss_tiny tests/fixtures/qwen3_moe_tiny; do
    fam=$(basename "$fix")
    prompt=$(golden_ids "$fix" prompt_ids)
    gold=$(golden_ids "$fix" gen_ids)
    G=$(echo "$gold" | tr ',' '\n' | wc -l)
    other=$(timeout 120 "$GEN" --model "$fix" --prompt-ids "$OTHER" --max-tokens "$G" \
            --ignore-eos 2>/dev/null)

    for layout in "--tp 2" "--tp 2 --ep 2" "--tp 4 --ep 4"; do
        # shellcheck disable=SC2086
        out=$(timeout 120 "$PGEN" --model "$fix" --prompt-ids "$prompt" --max-tokens "$G" \
              --ignore-eos $layout 2>"$tmp/err")
        if [ "$out" = "$gold" ]; then
            ok "$fam $layout (forked ranks): $G tokens equal HF's golden tokens"
        else
            fail "$fam $layout (forked ranks): tokens differ from golden" "$tmp/err"
        fi
    done

    out=$(timeout 120 "$PGEN" --model "$fix" --prompt-ids "$prompt;$OTHER" --max-tokens "$G" \
          --ignore-eos --dp 2 --ep 2 2>"$tmp/err")
    if [ "$out" = "$(printf '%s\n%s' "$gold" "$other")" ]; then
        ok "$fam --dp 2 --ep 2 (forked ranks): each rank's prompt decodes to the single-rank tokens"
    else
        fail "$fam --dp 2 --ep 2: tokens differ" "$tmp/err"
    fi

    # an orchestrator starts 4 ranks; ranks 2 and 3 have no prompt and idle
    name="$name_base-$fam-dp"
    rpids=()
    for r in 0 1 2 3; do
        timeout 120 "$PGEN" --model "$fix" --prompt-ids "$prompt;$OTHER" --max-tokens "$G" \
            --ignore-eos --dp 4 --ep 4 --rank $r --world 4 --comm-name "$name" \
            >"$tmp/out.$r" 2>"$tmp/err.$r" &
        rpids+=($!)
        pids+=($!)
    done
    st=0
    for p in "${rpids[@]}"; do wait "$p" || st=1; done
    if [ $st -eq 0 ] && [ "$(cat "$tmp/out.0")" = "$(printf '%s\n%s' "$gold" "$other")" ] &&
       [ ! -s "$tmp/out.1" ]; then
        ok "$fam --dp 4 --ep 4 (4 orchestrated processes, 2 idle): tokens equal single-rank"
    else
        fail "$fam --dp 4 --ep 4 orchestrated: status $st or tokens differ" \
            "$tmp/out.0" "$tmp/err.0" "$tmp/err.1" "$tmp/err.2" "$tmp/err.3"
    fi
done

fix=tests/fixtures/qwen3_moe_tiny
prompt=$(golden_ids "$fix" prompt_ids)

# A long run, so the victim is killed while the group is working.
long=(--model "$fix" --prompt-ids "$prompt" --max-tokens 4000 --ignore-eos)

# orchestrated TP=2: kill rank 1 once it generates; rank 0 must fail, naming it
name="$name_base-crash"
timeout 120 "$PGEN" "${long[@]}" --tp 2 --rank 0 --world 2 --comm-name "$name" \
    >"$tmp/c.out0" 2>"$tmp/c.err0" &
r0=$!; pids+=($r0)
timeout 120 "$PGEN" "${long[@]}" --tp 2 --rank 1 --world 2 --comm-name "$name" \
    >"$tmp/c.out1" 2>"$tmp/c.err1" &
r1=$!; pids+=($r1)
if wait_for_line "$tmp/c.err1" "generating"; then
    victim=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$tmp/c.err1")
    kill -9 "$victim"
fi
wait "$r0"; st0=$?
wait "$r1" 2>/dev/null
if [ "$st0" -eq 1 ] && grep -q "rank 1 (pid [0-9]*) died" "$tmp/c.err0" && [ ! -s "$tmp/c.out0" ]; then
    ok "TP=2: SIGKILL of rank 1 makes rank 0 exit 1: $(grep -m1 'died' "$tmp/c.err0")"
else
    fail "TP=2 crash: rank 0 status $st0 (want 1 and a 'died' message)" "$tmp/c.err0"
fi

# forked DP=2 x EP=2: kill the child rank; the parent (rank 0) fails and reports it
timeout 120 "$PGEN" --model "$fix" --prompt-ids "$prompt;$OTHER" --max-tokens 4000 \
    --ignore-eos --dp 2 --ep 2 >"$tmp/f.out" 2>"$tmp/f.err" &
fp=$!; pids+=($fp)
if wait_for_line "$tmp/f.err" "rank 1 of 2"; then
    victim=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$tmp/f.err")
    kill -9 "$victim"
fi
wait "$fp"; st=$?
if [ "$st" -eq 1 ] && grep -q "rank 1 (pid [0-9]*) died" "$tmp/f.err" &&
   grep -q "rank 1 was killed by signal 9" "$tmp/f.err"; then
    ok "DP=2 x EP=2 forked: SIGKILL of the child rank fails the group with exit 1"
else
    fail "DP=2 crash: status $st (want 1, 'died' and 'killed by signal 9')" "$tmp/f.err"
fi

# layouts and flags that cannot work
expect_fail() {
    local what=$1 want=$2 msg=$3
    shift 3
    timeout 60 "$PGEN" "$@" >"$tmp/b.out" 2>"$tmp/b.err"
    local st=$?
    if [ "$st" -eq "$want" ] && grep -qF -- "$msg" "$tmp/b.err" && [ ! -s "$tmp/b.out" ]; then
        ok "$what refused (exit $st: $(grep -m1 -F -- "$msg" "$tmp/b.err" | cut -c1-90))"
    else
        fail "$what: exit $st, wanted $want and '$msg'" "$tmp/b.err"
    fi
}
expect_fail "--tp 3 with 4 heads" 1 "TP 3 does not divide the 4 attention heads" \
    --model "$fix" --prompt-ids 1,2 --max-tokens 2 --tp 3
expect_fail "--tp 2 --dp 2" 2 "cannot both exceed 1" \
    --model "$fix" --prompt-ids 1,2 --max-tokens 2 --tp 2 --dp 2
expect_fail "--ep 3 in --dp 2" 1 "EP 3 does not divide the 2 DP ranks" \
    --model "$fix" --prompt-ids 1,2 --max-tokens 2 --dp 2 --ep 3
expect_fail "--world not matching the layout" 2 "does not match the layout" \
    --model "$fix" --prompt-ids 1,2 --max-tokens 2 --tp 2 --rank 0 --world 3 --comm-name x
expect_fail "--rank without --comm-name" 2 "missing --comm-name" \
    --model "$fix" --prompt-ids 1,2 --max-tokens 2 --tp 2 --rank 0 --world 2
expect_fail "two prompts in a TP layout" 2 "runs one prompt" \
    --model "$fix" --prompt-ids "1,2;3" --max-tokens 2 --tp 2
expect_fail "empty prompt" 2 "--prompt-ids must be" \
    --model "$fix" --prompt-ids "1,2;" --max-tokens 2 --dp 2
expect_fail "a missing model directory" 1 "cannot load model" \
    --model "$tmp/nothing" --prompt-ids 1,2 --max-tokens 2 --tp 2

left=$(ls /dev/shm 2>/dev/null | grep -c -e "tandem-comm-$name_base" || true)
if [ "$left" -eq 0 ]; then
    ok "no shared-memory segment left in /dev/shm"
else
    fail "$left segment(s) left in /dev/shm"
fi

tap_plan
