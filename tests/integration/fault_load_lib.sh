# Helpers for the fault-under-load tests (sourced after cluster_lib.sh):
# a few distinct greedy prompts, their tandem-generate outputs, streaming
# load with a per-request deadline through tandem-loadgen, and the checks
# every such test makes (nothing never-ended, nothing failed, every stream
# equal to tandem-generate for its prompt, every KV page free).
#
#   fault_prompts MODEL_DIR N_PROMPTS MAX_TOKENS  # writes $CLUSTER_TMP/prompts, /want
#   fault_load NAME CLIENTS DEADLINE_S [loadgen flags]  # background: $! is its pid
#   fault_check_load NAME CLIENTS                  # TAP lines for its results
#   fault_kv_free WORKER...                        # TAP line: every page free
#   fault_wait_metric 'NAME{LABELS}' MIN           # until the router's sample >= MIN
#   fault_survived PID LOG WHAT                    # TAP line: same process, no UCX abort

# fault_prompts MODEL_DIR N MAX_TOKENS: N prompts (prefixes of the fixture's
# golden prompt, of different lengths) and tandem-generate's greedy output
# for each (line i of want is the output for line i of prompts).
fault_prompts() {
    local dir=$1 n=$2 max=$3 prompt i len
    FAULT_MAX_TOKENS=$max
    prompt=$(golden_ids "$dir" prompt_ids)
    : >"$CLUSTER_TMP/prompts"
    : >"$CLUSTER_TMP/want"
    for i in $(seq 1 "$n"); do
        len=$((6 + 7 * i))
        echo "$prompt" | cut -d, -f1-"$len" >>"$CLUSTER_TMP/prompts"
        timeout 60 "$BIN/tandem-generate" --model "$dir" \
            --prompt-ids "$(sed -n "${i}p" "$CLUSTER_TMP/prompts")" --max-tokens "$max" \
            --ignore-eos 2>/dev/null >>"$CLUSTER_TMP/want"
    done
}

# fault_load NAME CLIENTS DEADLINE_S [flags]: CLIENTS concurrent greedy
# streams (one request each, the prompts of fault_prompts in turn) in the
# background; each request that has not ended after DEADLINE_S is cut off
# and counted as lost (never ended). Output in $CLUSTER_TMP/NAME.{out,err,toks}.
fault_load() {
    local name=$1 clients=$2 deadline=$3
    shift 3
    "$BIN/tandem-loadgen" --url "$URL" --model "$(basename "$CLUSTER_MODEL")" \
        --clients "$clients" --requests "$clients" --out-min "$FAULT_MAX_TOKENS" \
        --out-max "$FAULT_MAX_TOKENS" --prompts-file "$CLUSTER_TMP/prompts" \
        --tokens-out "$CLUSTER_TMP/$name.toks" --timeout-s "$deadline" --verbose "$@" \
        >"$CLUSTER_TMP/$name.out" 2>"$CLUSTER_TMP/$name.err" &
}

# fault_check_load NAME CLIENTS: after `wait` on fault_load's pid: no
# stream never ended (lost), none failed (HTTP or stream error, malformed),
# and every stream's tokens equal tandem-generate's for its prompt.
fault_check_load() {
    local name=$1 clients=$2 res val_of
    res=$(grep '^RESULT ' "$CLUSTER_TMP/$name.out")
    val_of() { echo "$res" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    [ -n "$res" ] && [ "$(val_of lost)" = 0 ]
    check "$name: none of $clients streams never ended" $? "${res:-no RESULT line}" \
        "$(grep lost "$CLUSTER_TMP/$name.err" | head -5)"
    [ "$(val_of ok)" = "$clients" ]
    check "$name: all $clients streams complete, none failed" $? "${res:-no RESULT line}" \
        "$(head -5 "$CLUSTER_TMP/$name.err")"
    local bad
    bad=$(awk 'NR == FNR { want[NR - 1] = $0; next }
               $3 == "ok" && $4 != want[$2] { n++; if (n <= 3) print "request " $1 ": got " $4 " want " want[$2] }
               END { if (n) print n " streams differ" }' "$CLUSTER_TMP/want" "$CLUSTER_TMP/$name.toks")
    [ -s "$CLUSTER_TMP/$name.toks" ] && [ -z "$bad" ]
    check "$name: every stream equals tandem-generate for its prompt" $? "$bad"
}

# fault_kv_free BOUND_S WORKER...: within BOUND_S seconds every named
# decoder's tandem_kv_cache_blocks_used is 0 (the workers' metrics reach
# the router with their heartbeats).
fault_kv_free() {
    local bound=$1 w used="" all _
    shift
    for _ in $(seq 1 $((bound * 10))); do
        all=1
        used=""
        for w in "$@"; do
            u=$(metric "tandem_kv_cache_blocks_used{pool=\"decode\",worker=\"$w\"}")
            used="$used $w=$u"
            [ "$u" = 0 ] || all=0
        done
        [ "$all" = 1 ] && break
        sleep 0.1
    done
    [ "$all" = 1 ]
    check "every KV page is free within $bound s (decoder metrics)" $? "blocks used:$used"
}

# fault_wait_metric 'NAME{LABELS}' MIN: waits (about 10 s) until that sample
# of the router's /metrics is at least MIN (a point in the load to strike
# at); fails otherwise.
fault_wait_metric() {
    local v _
    for _ in $(seq 1 200); do
        v=$(metric "$1")
        [ "${v:-0}" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# fault_survived PID LOG WHAT: the worker that lost its peer is still the
# process it was, and its log shows no UCX abort (Fatal, Assertion).
fault_survived() {
    kill -0 "$1" 2>/dev/null && ! grep -qE "Fatal|Assertion" "$2"
    check "$3 (same process, no UCX abort)" $? "$(grep -m3 -A3 -E "Fatal|Assertion" "$2")"
}
