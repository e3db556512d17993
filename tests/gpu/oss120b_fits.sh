# Sourced by run.sh and seed_table.sh. oss120b_fits: whether GPT-OSS-120B's
# synthetic FP8 weights and their temporaries fit one card of this machine
# (they do not on an 80 GB H100); sets GPU_MIB to the card's memory in MiB
# ("?" when nvidia-smi cannot say, which counts as not fitting).
oss120b_fits() {
    GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
    GPU_MIB=${GPU_MIB:-?}
    [ "$GPU_MIB" != "?" ] && [ "$GPU_MIB" -ge 100000 ]
}
