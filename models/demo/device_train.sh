#!/usr/bin/env bash
# Runs on the GPU machine (torch there; nothing else is needed): trains both
# demo models side by side on the one GPU on the data `make demo-data`
# rendered (carried in build/demo-data) and leaves each checkpoint in
# $OUT/NAME/ (config.json, weights.safetensors, metrics.json) with the
# training logs. The recipe of run s5run2 (models/demo/README.md):
# gpt_oss_demo, the full size from scratch at 8192 tokens a step;
# qwen3_demo, the tiny size continued from the committed weights (--init)
# at 4096 tokens a step and lr 1e-3.
#
#   bash models/demo/device_train.sh [DATA_DIR] [SECONDS_PER_MODEL]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
DATA=${1:-build/demo-data}
SECONDS_PER_MODEL=${2:-400}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
nvidia-smi -L 2>/dev/null
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
train() { # NAME ARCH ARGS...
    local name=$1 arch=$2
    shift 2
    python3 models/demo/train.py --arch "$arch" --data "$DATA" --out "$OUT/$name" \
        --seconds "$SECONDS_PER_MODEL" --threads 4 "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $?" >> "$OUT/exits.txt"
}
rm -f "$OUT/exits.txt"
train gpt_oss_demo gpt_oss --size full --batch-tokens 8192 &
train qwen3_demo qwen3_moe --size tiny --batch-tokens 4096 --lr 1e-3 --init models/demo/qwen3_demo &
wait
cat "$OUT/exits.txt"
tail -n 2 "$OUT"/*.log
ls -la "$OUT" "$OUT"/*/
! grep -qv ': exit 0$' "$OUT/exits.txt"
