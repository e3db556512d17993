#!/usr/bin/env bash
# Issue 6 item 5 on the GPU machine, in one device call (about 30 s): the
# engine's parallel layouts through NCCL at world size 1 on one GPU.
#   1. test_comm_nccl: the NCCL communicator's collectives and comm_split;
#   2. test_parallel_nccl: TP, TP+EP and DP x EP (all-to-all dispatch, idle
#      steps) for both tiny fixtures, f32 and bf16 weights, against the
#      single-rank model (1e-4), HF's golden logits and tokens, with the
#      communicators' counters checked against what each layout prescribes;
#   3. test_parallel_nccl --two-ranks: TP=2 as two processes on the one GPU,
#      a skip when NCCL refuses two ranks on one device (its message shown);
#   4. a short summary last.
# The programs come from $TANDEM_PREBUILT (tests/gpu/make_prebuilt.sh DEST,
# made on a machine with nvcc and nccl.h: the GPU image has nccl.h only in
# the nvidia-nccl Python package, which the Makefile does not look in).
# libnccl.so.2 is the image's: $NCCL_LIB. Logs go to $OUT (default
# /tmp/tandem-gpu-nccl). Exit status non-zero if a check failed.
# Usage: TANDEM_PREBUILT=DIR bash tests/gpu/run_nccl.sh   (from anywhere)
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-nccl}
mkdir -p "$OUT"
NCCL_LIB=${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
export NCCL_NVLS_ENABLE=0
t_start=$(date +%s)
status=0

P=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a tests/gpu/make_prebuilt.sh folder}
BIN=$P/bin
LIBS=$(cd "$P/lib" && pwd)
export LD_LIBRARY_PATH="$LIBS:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 |
    tee "$OUT/gpu.txt"
for p in test_parallel_nccl test_comm_nccl; do
    [ -x "$BIN/$p" ] || { echo "Bail out! $BIN/$p missing (rerun make_prebuilt.sh)"; exit 1; }
done
if ldd "$BIN/test_parallel_nccl" "$BIN/test_comm_nccl" | grep "not found"; then
    echo "Bail out! libraries not found (NCCL_LIB=$NCCL_LIB)"
    exit 1
fi
nccl_so=$(ldd "$BIN/test_parallel_nccl" | awk '$1 ~ /^libnccl/ { print $3 }')
echo "libnccl: $nccl_so"

counts() {   # LOG -> "N ok, N not ok, N skipped"
    echo "$(grep -c '^ok ' "$1") ok, $(grep -c '^not ok ' "$1") not ok, $(grep -ci '^ok .*# skip' "$1") skipped"
}

echo "== test_comm_nccl (world size 1)"
CMOCKA_MESSAGE_OUTPUT=TAP timeout 30 "$BIN/test_comm_nccl" >"$OUT/test_comm_nccl.log" 2>&1
rc=$?
cat "$OUT/test_comm_nccl.log"
[ $rc -eq 0 ] || { status=1; echo "test_comm_nccl: exit $rc"; }
comm_res="$(counts "$OUT/test_comm_nccl.log"), exit $rc"

echo "== test_parallel_nccl (TP, TP+EP, DP x EP at world size 1)"
timeout 60 "$BIN/test_parallel_nccl" >"$OUT/test_parallel_nccl.log" 2>&1
rc=$?
cat "$OUT/test_parallel_nccl.log"
[ $rc -eq 0 ] || { status=1; echo "test_parallel_nccl: exit $rc"; }
par_res="$(counts "$OUT/test_parallel_nccl.log"), exit $rc"

echo "== test_parallel_nccl --two-ranks (TP=2 on the one GPU)"
# NCCL's own warnings (why it refuses) go to the log
NCCL_DEBUG=WARN timeout 30 "$BIN/test_parallel_nccl" --two-ranks >"$OUT/two_ranks.log" 2>&1
rc=$?
cat "$OUT/two_ranks.log"
if [ $rc -eq 124 ]; then
    echo "not ok - TP=2 on one GPU: no answer within 30 s" | tee -a "$OUT/two_ranks.log"
fi
[ $rc -eq 0 ] || status=1
two_res="$(counts "$OUT/two_ranks.log"), exit $rc"

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(cut -d, -f1 "$OUT/gpu.txt" | head -1), $(( $(date +%s) - t_start )) s)"
echo "| step | result |"
echo "| --- | --- |"
echo "| test_comm_nccl | $comm_res |"
echo "| test_parallel_nccl | $par_res |"
echo "| test_parallel_nccl --two-ranks | $two_res |"
grep -h '^not ok' "$OUT"/test_comm_nccl.log "$OUT"/test_parallel_nccl.log "$OUT"/two_ranks.log | head -20
echo "RESULT: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
