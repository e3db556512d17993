# Sourced by the GPU check scripts that run prebuilt programs
# (moe_gemm_check.sh, attn_wgmma_check.sh) after their --help: $OUT,
# $SEED, the programs of $TANDEM_PREBUILT (a make_prebuilt.sh folder or its
# .tar.xz, unpacked outside $OUT so that only logs travel back) as $BIN with
# their libraries $LIBS, run CMD... (with those libraries and the image's
# NCCL), status / rows for the summary, and limit WANTED (the seconds a step
# may take: at most what is left of BUDGET_S, default 560).
OUT=${OUT:-/tmp/tandem-gpu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
SEED=${SEED:-$(date +%s)}
PB=${TANDEM_PREBUILT:?set TANDEM_PREBUILT to a make_prebuilt.sh folder or its .tar.xz}
case "$PB" in
*.tar.xz) U=$(mktemp -d) && tar xJf "$PB" -C "$U" && PB="$U/$(tar tJf "$PB" | head -1 | cut -d/ -f1)" ;;
esac
BIN=$(cd "$PB/bin" && pwd) && LIBS=$(cd "$PB/lib" && pwd) || { echo "no $PB/bin or lib"; exit 1; }
NCCL_LIB=${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
# our programs get our library path (and the image's NCCL); python keeps its own
run() { LD_LIBRARY_PATH="$LIBS:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
status=0
rows=()
t_start=$(date +%s)
BUDGET=${BUDGET_S:-560}
limit() {
    local left=$((BUDGET - ($(date +%s) - t_start) - 10))
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
echo "seed $SEED, tree $(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
