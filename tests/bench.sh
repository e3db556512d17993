#!/usr/bin/env bash
# `make bench`: measurements, not checks. Each block prints its own table;
# copy the figures into docs/PERF.md together with the command and machine.
set -euo pipefail
BUILD=${BUILD:-build}

echo "== engine, CPU backend, tiny fixture models (OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}) =="
for m in tests/fixtures/gpt_oss_tiny tests/fixtures/qwen3_moe_tiny; do
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1 \
        "$BUILD"/bin/tandem-bench --model "$m"
done

echo "== TransferEngine, two processes on loopback (tcp, sm) vs memcpy =="
"$BUILD"/bin/tandem-transfer-bench

echo "== one request's KV (4096 tokens, GPT-OSS-20B shapes): loopback tcp vs same-host shared memory =="
BUILD="$BUILD" bash tests/bench_kv_request.sh
