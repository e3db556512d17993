#!/usr/bin/env bash
# The workers' device flags (--device, --weights, --kv-path): --help lists
# them; bad values are refused with exit 2 and the flag named; --device cuda
# on a build without CUDA fails with exit 1 and "rebuild with make CUDA=1"
# before it touches the router (no crash, no sanitizer report). Then the
# staged KV path on the CPU (--kv-path staged: the pools are mirrored in host
# buffers, pushed from the prefiller's mirror into the decoder's and copied
# into its cache on arrival, the path the GPU takes when UCX has no CUDA
# support): both fixtures' 32 greedy tokens through the cluster equal HF's
# golden, resharding between page sizes 16 and 5, and the workers log
# which path they took.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/cluster_lib.sh
dir=tests/fixtures/gpt_oss_tiny

for role in prefiller decoder; do
    out=$(timeout 10 "$BIN/tandem-$role" --help 2>&1)
    rc=$?
    [ "$rc" = 0 ] && echo "$out" | grep -q -- "--device .*cpu, cuda (GPU 0) or cuda:N" &&
        echo "$out" | grep -q -- "--weights .*auto" && echo "$out" | grep -q -- "--kv-path .*staged" &&
        echo "$out" | grep -q -- "--rank-comm .*staged" && echo "$out" | grep -q -- "--group-leader"
    check "tandem-$role --help lists --device, --weights, --kv-path and the rank flags" $? \
        "exit $rc" "$out"
done

# expect_exit NAME ROLE STATUS MESSAGE FLAGS...: the worker exits with STATUS
# (within 20 s: it never waits for a router) and says MESSAGE on stderr.
expect_exit() {
    local name=$1 role=$2 want=$3 msg=$4
    shift 4
    timeout 20 "$BIN/tandem-$role" --router tcp://127.0.0.1:1 --metrics-port -1 "$@" \
        >"$CLUSTER_TMP/out" 2>&1
    local rc=$?
    [ "$rc" = "$want" ] && grep -qF -- "$msg" "$CLUSTER_TMP/out" &&
        ! grep -qE "Sanitizer|runtime error" "$CLUSTER_TMP/out"
    check "tandem-$role: $name (exit $want)" $? "exit $rc" "$(head -5 "$CLUSTER_TMP/out")"
}

for role in prefiller decoder; do
    expect_exit "unknown --device" $role 2 "--device must be cpu, cuda or cuda:N, got 'gpu'" \
        --model "$dir" --device gpu
    expect_exit "bad --device ordinal" $role 2 "--device must be cpu, cuda or cuda:N" \
        --model "$dir" --device cuda:x
    expect_exit "unknown --weights" $role 2 "--weights must be auto, f32, bf16 or fp8, got 'fp4'" \
        --model "$dir" --weights fp4
    expect_exit "unknown --kv-path" $role 2 "--kv-path must be auto, direct or staged" \
        --model "$dir" --kv-path rdma
done
# the rank group's flags (docs/OPERATIONS.md "Multi-rank workers")
for role in prefiller decoder; do
    [ $role = prefiller ] && ranks=--tp || ranks=--dp
    expect_exit "unknown --rank-comm" $role 2 \
        "--rank-comm must be auto, host, nccl or staged, got 'mpi'" --model "$dir" --rank-comm mpi
    expect_exit "--rank-devices on the CPU" $role 2 "--rank-devices needs --device cuda" \
        --model "$dir" $ranks 2 --rank-devices 0,0
    expect_exit "--rank-comm nccl on the CPU" $role 1 \
        "the nccl rank communicator needs --device cuda" --model "$dir" $ranks 2 --rank-comm nccl
    expect_exit "--local-ranks without a group leader" $role 1 \
        "--local-ranks needs --group-leader" --model "$dir" $ranks 2 --local-ranks 2
done
expect_exit "a group leader that never answers" decoder 1 \
    "rendezvous: cannot reach rank 0 at 127.0.0.1:1 within 1000 ms" --model "$dir" \
    --dp 4 --ep 4 --rank 2 --world 4 --local-ranks 2 --group-leader 127.0.0.1:1 \
    --group-timeout-ms 1000
if ldd "$BIN/tandem-prefiller" | grep -q libcudart; then
    echo "# a CUDA=1 build: --device cuda on a CPU-only build not checked here"
else
    for role in prefiller decoder; do
        expect_exit "--device cuda on a build without CUDA" $role 1 \
            "--device cuda: this build has no CUDA backend (rebuild with \`make CUDA=1\`" \
            --model "$dir" --device cuda
        expect_exit "--device cuda:1 on a build without CUDA" $role 1 \
            "this build has no CUDA backend" --model "$dir" --device cuda:1 --weights f32
        [ $role = prefiller ] && ranks=--tp || ranks=--dp
        expect_exit "--device cuda $ranks 2 on a build without CUDA" $role 1 \
            "this build has no CUDA backend" --model "$dir" --device cuda $ranks 2
    done
fi

# The staged KV path on the CPU backend, through the whole cluster.
for fx in gpt_oss_tiny qwen3_moe_tiny; do
    fdir=tests/fixtures/$fx
    prompt=$(golden_ids "$fdir" prompt_ids)
    golden=$(golden_ids "$fdir" gen_ids)
    PREFILLER_FLAGS="--device cpu --weights f32 --kv-path staged --page-size 16" \
    DECODER_FLAGS="--device cpu --weights f32 --kv-path staged --page-size 5 --kv-pages 256" \
        cluster_start "$fdir" || continue
    body="{\"model\":\"$fx\",\"prompt\":[$prompt],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
    code=$(post /v1/completions "$body" "$CLUSTER_TMP/greedy.json")
    got=$(json_get "$CLUSTER_TMP/greedy.json" '",".join(map(str, j["choices"][0]["token_ids"]))' 2>&1)
    [ "$code" = 200 ] && [ "$got" = "$golden" ]
    check "$fx: --kv-path staged: greedy tokens through the cluster = HF golden" $? \
        "HTTP $code" "cluster: $got" "golden:  $golden"
    grep -q "KV transfer staged through plain host buffers" "$CLUSTER_TMP/prefiller.log" &&
        grep -q "KV transfer staged through plain host buffers" "$CLUSTER_TMP/decoder.log" &&
        grep -q "model on cpu, f32 weights" "$CLUSTER_TMP/decoder.log" &&
        grep -q "on cpu, " "$CLUSTER_TMP/prefiller.log"
    check "$fx: both workers log the device, the weights and the staged KV path" $? \
        "$(grep -h "KV transfer\|model on" "$CLUSTER_TMP"/prefiller.log "$CLUSTER_TMP"/decoder.log)"
    cluster_stop 1
    [ "$T_FAILED" -eq 0 ] && rm -f "$CLUSTER_TMP"/*.log  # the next fixture logs afresh
done
cluster_finish
