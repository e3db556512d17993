#!/usr/bin/env bash
# The image's sources, checked without Docker (none here): the Dockerfile
# passes its linter (tests/deploy/lint_dockerfile.mjs: dockerfile-utils'
# validator with every rule an error, plus pinned bases, a non-root USER and
# an ENTRYPOINT), and the linter really catches a bad Dockerfile; the
# .dockerignore lets in what the Dockerfile copies; the scripts the image
# installs (deploy/image/) parse and do what the manifests rely on:
# tandem-decoder-pod's ranks for a GB200 group of 4 pods x 4 GPUs against
# the formula of deploy/base/decoder-statefulset.yaml, runtime-packages.sh
# on a real program; `make image` without Docker says so. Prints TAP lines.
# Needs `make deps` (node and tests/deploy/node_modules) and build/bin.
set -u
DEPLOY=tests/deploy
BIN=${BUILD:-build}/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
# make outside the make that runs the tests (`make test-asan` runs a sub-make,
# whose flags would add "Entering directory" lines to what we read)
plain_make() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES make "$@"; }
ok() { echo "ok - $1"; }
notok() { echo "not ok - $1"; failed=1; [ $# -gt 1 ] && sed 's/^/# /' "$2" | head -30; }

if [ ! -d "$DEPLOY/node_modules/dockerfile-utils" ] || ! command -v node >/dev/null 2>&1; then
    notok "the Dockerfile linter is installed (make deps runs npm ci in $DEPLOY)"
    exit 1
fi

# --- the linter on the real Dockerfile and on a broken one ------------------
if node "$DEPLOY/lint_dockerfile.mjs" Dockerfile >"$tmp/lint.out" 2>&1; then
    ok "Dockerfile: no linter diagnostics (warnings included)"
else
    notok "Dockerfile: no linter diagnostics (warnings included)" "$tmp/lint.out"
fi
cat >"$tmp/Dockerfile.bad" <<'EOF'
from ubuntu
MAINTAINER someone
RUN apt-get update && \

    apt-get install -y curl
WORKDIR relative/dir
HEALTHCHECK --interval=5x CMD true
FRM nothing
CMD ['echo', 'hi']
EOF
node "$DEPLOY/lint_dockerfile.mjs" "$tmp/Dockerfile.bad" >"$tmp/bad.out" 2>&1
rc=$?
missing=
for want in "uppercase" "MAINTAINER has been deprecated" "Empty continuation line" \
    "WORKDIR paths should be absolute" "unknown unit" "Unknown instruction: FRM" \
    "single quotes" "not pinned to a tag" "non-root USER" "no ENTRYPOINT"; do
    grep -q "$want" "$tmp/bad.out" || missing="$missing [$want]"
done
if [ $rc -eq 1 ] && [ -z "$missing" ]; then
    ok "the linter rejects a bad Dockerfile with each of its ten problems"
else
    echo "# exit $rc, not reported:$missing" >>"$tmp/bad.out"
    notok "the linter rejects a bad Dockerfile with each of its ten problems" "$tmp/bad.out"
fi
# a warning alone fails too (a clean file with one deprecated instruction)
printf 'FROM debian:12\nMAINTAINER x\nUSER 1000\nENTRYPOINT ["true"]\n' >"$tmp/Dockerfile.one"
if ! node "$DEPLOY/lint_dockerfile.mjs" "$tmp/Dockerfile.one" >"$tmp/one.out" 2>&1 &&
    [ "$(grep -c ': error: \|: warning: ' "$tmp/one.out")" = 1 ]; then
    ok "the linter fails on a single diagnostic"
else
    notok "the linter fails on a single diagnostic" "$tmp/one.out"
fi

# --- what the Dockerfile copies gets through .dockerignore ------------------
# every COPY source under vocab/ is re-included after `vocab` is excluded
bad=
for src in $(awk '$1 == "COPY" && $2 ~ /^vocab\// { print $2 }' Dockerfile); do
    grep -qx "!$src" .dockerignore || bad="$bad $src"
    [ -f "$src" ] || bad="$bad $src(missing: make deps)"
done
if [ -f .dockerignore ] && grep -qx vocab .dockerignore && grep -qx build .dockerignore && [ -z "$bad" ]; then
    ok ".dockerignore keeps build outputs and vocab/ out but lets the copied vocabularies in"
else
    echo "# not let in:$bad" >"$tmp/ignore.out"
    notok ".dockerignore keeps build outputs and vocab/ out but lets the copied vocabularies in" "$tmp/ignore.out"
fi

# --- the image's scripts ----------------------------------------------------
bad=
for f in deploy/image/*; do sh -n "$f" 2>>"$tmp/sh.out" || bad="$bad $f"; done
[ -z "$bad" ] && ok "deploy/image scripts parse (sh -n)" || notok "deploy/image scripts parse (sh -n):$bad" "$tmp/sh.out"

# tandem-decoder-pod: ordinal k of a group of G=4 pods x P=4 GPUs runs ranks
# (k % 4) * 4 + i on cuda:i, world 16, leader pod k - k % 4
layout_ok=1
for k in 0 1 2 3 4 7; do
    out=$(POD_NAME=tandem-decoder-$k POD_NAMESPACE=tandem TANDEM_DECODER_PODS_PER_GROUP=4 \
        TANDEM_DECODER_GPUS_PER_POD=4 TANDEM_DECODER_HEADLESS_SERVICE=tandem-decoder-headless \
        sh deploy/image/tandem-decoder-pod --print --model=/m --dp=16 --ep=16 2>&1)
    echo "$out" >>"$tmp/pod.out"
    leader=$((k - k % 4))
    echo "$out" | grep -qx "leader: tandem-decoder-$leader.tandem-decoder-headless.tandem.svc:8092" || layout_ok=0
    for i in 0 1 2 3; do
        r=$(((k % 4) * 4 + i))
        echo "$out" | grep -q "^rank $r: tandem-decoder --model=/m --dp=16 --ep=16 --rank=$r --world=16 --device=cuda:$i --comm-name=tandem-decoder-group-$((k / 4))" ||
            layout_ok=0
    done
    [ "$(echo "$out" | grep -c '^rank ')" = 4 ] || layout_ok=0
done
[ $layout_ok = 1 ] && ok "tandem-decoder-pod: ranks, devices and leader of a 4 x 4 GB200 group from the ordinal" ||
    notok "tandem-decoder-pod: ranks, devices and leader of a 4 x 4 GB200 group from the ordinal" "$tmp/pod.out"
out=$(POD_NAME=tandem-decoder-3 TANDEM_DECODER_PODS_PER_GROUP=1 TANDEM_DECODER_GPUS_PER_POD=8 \
    sh deploy/image/tandem-decoder-pod --print --dp=8 --ep=8 2>&1)
echo "$out" | grep -qx "exec: tandem-decoder --dp=8 --ep=8" &&
    ok "tandem-decoder-pod: a one-pod group (H200) runs tandem-decoder with the flags as given" ||
    { echo "$out" >"$tmp/h200.out"; notok "tandem-decoder-pod: a one-pod group (H200) runs tandem-decoder with the flags as given" "$tmp/h200.out"; }
refused=1
for bad_env in "POD_NAME=decoder TANDEM_DECODER_PODS_PER_GROUP=1 TANDEM_DECODER_GPUS_PER_POD=8 --dp=8" \
    "POD_NAME=d-1 TANDEM_DECODER_PODS_PER_GROUP=4 TANDEM_DECODER_GPUS_PER_POD=4 --dp=8" \
    "POD_NAME=d-1 TANDEM_DECODER_PODS_PER_GROUP=0 TANDEM_DECODER_GPUS_PER_POD=4 --dp=0" \
    "POD_NAME=d-1 TANDEM_DECODER_PODS_PER_GROUP=1 TANDEM_DECODER_GPUS_PER_POD=8 --dp=8 --rank=2"; do
    set -- $bad_env
    # shellcheck disable=SC2046
    env "$1" "$2" "$3" TANDEM_DECODER_BIN=/bin/false sh deploy/image/tandem-decoder-pod "${@:4}" >"$tmp/refuse.out" 2>&1
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q "^tandem-decoder-pod: " "$tmp/refuse.out"; then
        refused=0
        echo "# accepted: $bad_env (exit $rc)" >>"$tmp/refused.out"
    fi
done
[ $refused = 1 ] && ok "tandem-decoder-pod refuses a bad POD_NAME, a --dp that is not the group, bad counts and --rank" ||
    notok "tandem-decoder-pod refuses a bad POD_NAME, a --dp that is not the group, bad counts and --rank" "$tmp/refused.out"
if sh deploy/image/tandem-entrypoint help | grep -q "decoder-pod" &&
    ! sh deploy/image/tandem-entrypoint nonsense >/dev/null 2>&1; then
    ok "tandem-entrypoint lists the roles and refuses an unknown one"
else
    notok "tandem-entrypoint lists the roles and refuses an unknown one"
fi

# runtime-packages.sh on the real router: the packages of the libraries it
# links (ZeroMQ, protobuf-c, libmicrohttpd) are named
echo "# no $BIN/tandem-router or no dpkg" >"$tmp/pkgs.out"
if [ -x "$BIN/tandem-router" ] && command -v dpkg >/dev/null 2>&1 &&
    sh deploy/image/runtime-packages.sh "$BIN/tandem-router" >"$tmp/pkgs.out" 2>&1 &&
    grep -q '^libzmq' "$tmp/pkgs.out" && grep -q '^libprotobuf-c' "$tmp/pkgs.out" &&
    grep -q '^libmicrohttpd' "$tmp/pkgs.out"; then
    ok "runtime-packages.sh names the packages of tandem-router's libraries"
else
    notok "runtime-packages.sh names the packages of tandem-router's libraries" "$tmp/pkgs.out"
fi

# --- make image without Docker -----------------------------------------------
if ! plain_make -s --no-print-directory image DOCKER=/nonexistent/docker >"$tmp/image.out" 2>&1 &&
    grep -q "is not installed here" "$tmp/image.out" && grep -q "$(plain_make -s --no-print-directory print-image)" "$tmp/image.out"; then
    ok "make image without Docker fails and says which image to build where"
else
    notok "make image without Docker fails and says which image to build where" "$tmp/image.out"
fi
exit $failed
