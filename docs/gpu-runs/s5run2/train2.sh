#!/usr/bin/env bash
# s5run2: demo-model training variants side by side on the one GPU; the
# best by held-out exact match replaces the committed weights (if better).
set -u
export PYTHONUNBUFFERED=1
S=${1:-420}
D=build/demo-data
T=$OUT/train; mkdir -p $T
nvidia-smi -L
run() { # NAME ARCH SIZE ARGS...
  local n=$1 arch=$2 size=$3; shift 3
  python3 models/demo/train.py --arch $arch --data $D --out $T/$n --size $size --seconds $S --threads 3 "$@" > $T/$n.log 2>&1
  echo "$n exit $?" >> $T/exits.txt
}
run oss_full_b8k gpt_oss full --batch-tokens 8192 &
run oss_tiny_init gpt_oss tiny --batch-tokens 4096 --lr 1e-3 --init models/demo/gpt_oss_demo &
run qwen_full_b8k qwen3_moe full --batch-tokens 8192 &
run qwen_tiny_init qwen3_moe tiny --batch-tokens 4096 --lr 1e-3 --init models/demo/qwen3_demo &
wait
cat $T/exits.txt
for f in $T/*/metrics.json; do echo "$f: $(python3 -c "import json,sys;m=json.load(open('$f'));print(m['steps'],m['epochs_started'],m['train_loss_ema'],m['heldout_loss'],m['heldout_exact_match'],{k:v['exact_match'] for k,v in m['heldout_by_task'].items()})")"; done
(cd $OUT && tar czf train.tgz train && rm -rf train)
