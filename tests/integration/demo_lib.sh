# Shared by the demo-model tests (sourced after cluster_lib.sh):
# demo_cluster_checks NAME VOCAB FORMAT starts a cluster serving
# $BUILD/models/NAME with the router on VOCAB and runs demo_checks.py
# against it, one TAP line per check.
demo_cluster_checks() {
    local name=$1 vocab=$2 format=$3 dir=$BUILD/models/$1 line
    if [ ! -f "$dir/model.safetensors" ]; then
        not_ok "$dir is built (make demo-models)"
        cluster_finish
    fi
    if [ ! -f "$vocab" ]; then
        not_ok "$vocab is installed (make deps)"
        cluster_finish
    fi
    cluster_start "$dir" --tokenizer "$vocab" || cluster_finish
    while IFS= read -r line; do
        case "$line" in
        PASS$'\t'*) ok "$name: ${line#PASS$'\t'}" ;;
        FAIL$'\t'*)
            line=${line#FAIL$'\t'}
            not_ok "$name: ${line%%$'\t'*}" "${line#*$'\t'}"
            ;;
        *) echo "$line" ;;
        esac
    done < <(python3 tests/integration/demo_checks.py "$URL" "$name" "$dir" "$vocab" "$format" \
        "$BIN" 2>&1)
}
