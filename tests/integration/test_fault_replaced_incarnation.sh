#!/usr/bin/env bash
# A decoder process d0 is frozen (SIGSTOP) and replaced meanwhile by a newer
# process under the same worker id, which then dies and expires. The old
# process's connection to the router is cut (it reaches the router through
# tcp_cut_proxy.py, as over a network that drops it) and the old process
# runs again: it connects again, hears "unknown worker", registers, and the
# router refuses that registration with ERROR_CODE_WORKER_REPLACED. The old
# process logs that once and exits 1 instead of registering again every
# second forever. A clean process started under the id afterwards (what an
# orchestrator does) registers and serves. (docs/RELIABILITY.md, "Worker
# incarnations")
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh

fx=gpt_oss_tiny
dir=tests/fixtures/$fx
cluster_start "$dir" --heartbeat-ms 100 --worker-timeout-ms 1500 || cluster_finish
python3 tests/integration/tcp_cut_proxy.py "$CLUSTER_TMP/proxy.port" "${WORKER_EP#tcp://}" \
    2>>"$CLUSTER_TMP/proxy.log" &
CLUSTER_PIDS+=($!)
CLUSTER_NAMES+=(proxy)
for _ in $(seq 1 100); do
    [ -s "$CLUSTER_TMP/proxy.port" ] && break
    sleep 0.05
done
WORKER_EP=tcp://127.0.0.1:$(cat "$CLUSTER_TMP/proxy.port") start_worker decoder d0
old=$(pid_of d0)
wait_health 1 2 300
check "d0 registers through the relay" $? "$(curl -s "$URL/healthz")" "$(tail -3 "$CLUSTER_TMP/d0.log")"

# ready_count: the prefiller's finished UCX set-ups to a decoder d0.
ready_count() { grep -c "decoder d0: connection ready" "$CLUSTER_TMP/prefiller.log"; }

# d0 freezes; a new process registers under d0 (a new incarnation).
kill -STOP "$old"
ready0=$(ready_count)
start_worker decoder d0-new --worker-id d0
for _ in $(seq 1 300); do
    grep -q "decoder d0 restarted (incarnation" "$CLUSTER_TMP/router.log" && break
    sleep 0.1
done
grep -q "decoder d0 restarted (incarnation" "$CLUSTER_TMP/router.log"
check "a second process under d0 replaces the frozen one (a new incarnation)" $? \
    "$(tail -5 "$CLUSTER_TMP/router.log")" "$(tail -3 "$CLUSTER_TMP/d0-new.log")"
# The prefiller's UCX set-up to the new process finishes before that is
# killed (a decoder killed during the set-up is another case).
for _ in $(seq 1 200); do
    [ "$(ready_count)" -gt "$ready0" ] && break
    sleep 0.1
done
[ "$(ready_count)" -gt "$ready0" ]
check "the prefiller's connection to the new process is set up" $? "$(tail -3 "$CLUSTER_TMP/prefiller.log")"

# The replacement dies and expires; the old process's connection drops;
# then the old process runs again.
kill -KILL "$(pid_of d0-new)"
forget d0-new
wait_health 1 1 100
check "the replacement's entry expires once it is killed" $? "$(curl -s "$URL/healthz")"
kill -USR1 "$(pid_of proxy)"
kill -CONT "$old"
for _ in $(seq 1 200); do
    kill -0 "$old" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$old" 2>/dev/null; then
    not_ok "the replaced process exits within 20 s of running again" \
        "$(tail -5 "$CLUSTER_TMP/d0.log")" "$(tail -3 "$CLUSTER_TMP/proxy.log")"
    kill -KILL "$old"
fi
wait "$old"
rc=$?
forget d0
[ "$rc" = 1 ]
check "the replaced process exits with status 1" $? "exit status $rc" "$(tail -5 "$CLUSTER_TMP/d0.log")"
n=$(grep -c "refused our registration: worker d0 incarnation [0-9a-f]* was replaced by a newer process" \
    "$CLUSTER_TMP/d0.log")
[ "$n" = 1 ]
check "it says so once, with the router's reason" $? "lines: $n" "$(tail -5 "$CLUSTER_TMP/d0.log")"
k=$(grep -c "registration refused: worker d0 incarnation" "$CLUSTER_TMP/router.log")
[ "$k" -ge 1 ] && [ "$k" -le 3 ]
check "the router refused it $k time(s), not once a second until killed" $? \
    "$(grep "registration refused" "$CLUSTER_TMP/router.log" | tail -3)"
! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$CLUSTER_TMP/d0.log"
check "it exits without a sanitizer report" $? \
    "$(grep -A12 -E "Sanitizer|runtime error" "$CLUSTER_TMP/d0.log" | head -30)"

# What an orchestrator does next: a clean process under the id serves.
start_worker decoder d0-clean --worker-id d0
wait_health 1 2 300
check "a clean process under d0 registers" $? "$(curl -s "$URL/healthz")" \
    "$(tail -3 "$CLUSTER_TMP/d0-clean.log")"
prompt=$(golden_ids "$dir" prompt_ids)
want=$(golden_ids "$dir" gen_ids | cut -d, -f1-8)
bad=()
for i in 0 1 2 3; do
    code=$(post /v1/completions "$(greedy_req "$fx" "$prompt" 8)" "$CLUSTER_TMP/r.$i.json")
    got=$(json_get "$CLUSTER_TMP/r.$i.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$want" ] || bad+=("$i: HTTP $code $got")
done
[ ${#bad[@]} -eq 0 ]
check "requests complete with the engine's tokens afterwards" $? "${bad[@]:-}"
cluster_finish
