#!/usr/bin/env bash
# Runs on the GPU machine (torch there; nothing else is needed): trains both
# demo models on the data `make demo-data` rendered (carried in
# build/demo-data) and leaves each checkpoint in $OUT/NAME/ (config.json,
# weights.safetensors, metrics.json) with the training logs. About 2 minutes
# of training per model plus start-up and evaluation.
#
#   bash models/demo/device_train.sh [DATA_DIR] [SECONDS_PER_MODEL]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
DATA=${1:-build/demo-data}
SECONDS_PER_MODEL=${2:-90}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
nvidia-smi -L 2>/dev/null
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
status=0
for pair in gpt_oss:gpt_oss_demo qwen3_moe:qwen3_demo; do
    arch=${pair%%:*}
    name=${pair#*:}
    python3 models/demo/train.py --arch "$arch" --data "$DATA" --out "$OUT/$name" \
        --size full --seconds "$SECONDS_PER_MODEL" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    echo "$name: exit $rc"
    [ "$rc" -eq 0 ] || status=1
done
ls -la "$OUT" "$OUT"/*/
exit $status
