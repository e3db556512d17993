#!/usr/bin/env bash
# deploy/: renders every kustomize overlay (and the Grafana dashboard
# ConfigMap) with `kubectl kustomize`, validates the output offline against
# the Kubernetes/KEDA/Prometheus Operator schemas and Tandem's own consistency
# rules (tests/deploy/validate_manifests.mjs: GPU backend by default, one GPU
# per rank, the image from `make print-image`, the router's vocabulary),
# starts tandem-router with each overlay's rendered configuration, and checks
# that the validator really rejects broken manifests. Prints TAP lines.
# Needs `make deps` (kubectl, the validator's npm packages under
# tests/deploy/node_modules, the vocabularies under vocab/) and build/bin.
set -u
VALIDATOR_DIR=tests/deploy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
# make outside the make that runs the tests (`make test-asan` runs a sub-make,
# whose flags would add "Entering directory" lines to what we read)
plain_make() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES make "$@"; }
ok() { echo "ok - $1"; }
notok() { echo "not ok - $1"; failed=1; [ $# -gt 1 ] && sed 's/^/# /' "$2" | head -30; }

if ! command -v kubectl >/dev/null 2>&1; then
    notok "kubectl is installed (make deps installs Debian's kubernetes-client)"
    exit 1
fi
if [ ! -d "$VALIDATOR_DIR/node_modules/kubernetes-models" ] || ! command -v node >/dev/null 2>&1; then
    notok "validator packages are installed (make deps runs npm ci in $VALIDATOR_DIR)"
    exit 1
fi

args=()
for dir in deploy/overlays/*/; do
    name=$(basename "$dir")
    if kubectl kustomize "$dir" >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then
        ok "kubectl kustomize deploy/overlays/$name"
        args+=(--manifests "$name=$tmp/$name.yaml")
    else
        notok "kubectl kustomize deploy/overlays/$name" "$tmp/$name.err"
    fi
done
[ ${#args[@]} -ge 10 ] && ok "at least five overlays rendered" || notok "at least five overlays rendered"

# The image every container must run: the one name:tag of the base
# kustomization's images: entry, as `make image` builds it.
if image=$(plain_make -s --no-print-directory print-image 2>"$tmp/image.err") && [ -n "$image" ]; then
    ok "make print-image names the image ($image)"
else
    notok "make print-image names the image" "$tmp/image.err"
    image=missing:image
fi

if kubectl kustomize deploy/grafana >"$tmp/grafana.yaml" 2>"$tmp/grafana.err" &&
    grep -q 'name: tandem-grafana-dashboard' "$tmp/grafana.yaml" && grep -q 'grafana_dashboard: "1"' "$tmp/grafana.yaml"; then
    ok "kubectl kustomize deploy/grafana gives the labelled dashboard ConfigMap"
else
    notok "kubectl kustomize deploy/grafana gives the labelled dashboard ConfigMap" "$tmp/grafana.err"
fi

# The validator prints its own TAP lines.
node "$VALIDATOR_DIR/validate_manifests.mjs" --metrics docs/METRICS.md "${args[@]}" \
    --dashboard deploy/grafana/tandem-dashboard.json \
    --image "$image" --vocab-root vocab --dockerfile Dockerfile || failed=1

# --- the router starts with each overlay's configuration --------------------
# router.conf + model.conf as rendered, the image's vocabulary folder mapped
# to vocab/ and the sockets moved to free loopback ports: the router must
# load the vocabulary the overlay's model speaks (its start-up line names
# it: o200k_harmony -> Harmony chat, qwen3 -> ChatML) and then stop cleanly.
ROUTER_BIN=${BUILD:-build}/bin/tandem-router
router_conf() { # RENDER KEY OUT: the router ConfigMap's KEY of a render
    (cd "$VALIDATOR_DIR" && node --input-type=module -e "
import fs from 'node:fs'; import yaml from 'js-yaml';
const cm = yaml.loadAll(fs.readFileSync(process.argv[1], 'utf8'))
    .find((d) => d && d.kind === 'ConfigMap' && d.data && d.data['router.conf'] !== undefined);
if (!cm || cm.data[process.argv[2]] === undefined) process.exit(1);
fs.writeFileSync(process.argv[3], cm.data[process.argv[2]]);
" "$1" "$2" "$3")
}
for name in h200 gb200 cpu; do
    r=$tmp/$name.yaml
    case $name in gb200) want=qwen3 ;; *) want=o200k_harmony ;; esac
    what="tandem-router starts with the $name overlay's router.conf + model.conf (tokenizer $want)"
    if [ ! -x "$ROUTER_BIN" ] || [ ! -f "$r" ] ||
        ! router_conf "$r" router.conf "$tmp/$name.router.conf" ||
        ! router_conf "$r" model.conf "$tmp/$name.model.conf.image"; then
        notok "$what (no $ROUTER_BIN or no render)"
        continue
    fi
    sed "s#/opt/tandem/vocab/#$PWD/vocab/#" "$tmp/$name.model.conf.image" >"$tmp/$name.model.conf"
    rm -f "$tmp/$name.ports"
    "$ROUTER_BIN" --config="$tmp/$name.router.conf" --config="$tmp/$name.model.conf" \
        --host=127.0.0.1 --http-port=0 --worker-port=0 --rpc-port=0 --metrics-port=-1 \
        --scaler=none --port-file="$tmp/$name.ports" >"$tmp/$name.router.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do # 30 s at most (loading the Qwen3 vocabulary under load)
        [ -s "$tmp/$name.ports" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    started=0
    [ -s "$tmp/$name.ports" ] && started=1
    kill -TERM "$pid" 2>/dev/null
    stopped=1
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then stopped=0; kill -KILL "$pid"; fi
    wait "$pid" 2>/dev/null
    # (its stdout is a file, so the start-up line is there once it exited)
    if [ $started = 1 ] && [ $stopped = 1 ] && grep -q "tokenizer $want\$" "$tmp/$name.router.log"; then
        ok "$what"
    else
        notok "$what" "$tmp/$name.router.log"
    fi
done

# --- the validator must catch real mistakes ---------------------------------
# expect_reject NAME FILE-KIND FILE PATTERN: run the validator on a broken
# copy; it must fail with a "not ok" line matching PATTERN.
expect_reject() {
    local what=$1 kind=$2 file=$3 pattern=$4 out=$tmp/reject.out
    if [ "$kind" = manifests ]; then
        node "$VALIDATOR_DIR/validate_manifests.mjs" --metrics docs/METRICS.md --manifests "broken=$file" \
            --image "$image" --vocab-root vocab --dockerfile Dockerfile >"$out" 2>&1
    else
        node "$VALIDATOR_DIR/validate_manifests.mjs" --metrics docs/METRICS.md --dashboard "$file" >"$out" 2>&1
    fi
    local rc=$?
    if [ "$rc" -ne 0 ] && grep -E "^not ok - .*$pattern" "$out" >/dev/null; then
        ok "validator rejects $what"
    else
        notok "validator rejects $what" "$out"
    fi
}
# mutate IN OUT JS: applies a JavaScript edit to every object (variable d) of a rendered file.
mutate() {
    (cd "$VALIDATOR_DIR" && node --input-type=module -e "
import fs from 'node:fs'; import yaml from 'js-yaml';
const docs = yaml.loadAll(fs.readFileSync(process.argv[1], 'utf8')).filter((d) => d);
for (const d of docs) { $3 }
fs.writeFileSync(process.argv[2], docs.map((d) => yaml.dump(d)).join('---\n'));
" "$1" "$2")
}
base=$tmp/gb200.yaml
if [ -f "$base" ]; then
    mutate "$base" "$tmp/b1.yaml" "if (d.kind === 'StatefulSet') d.spec.volumeClaimTemplates = {metadata: {labels: {a: 'b'}}};"
    expect_reject "a malformed StatefulSet (schema)" manifests "$tmp/b1.yaml" "schema"
    mutate "$base" "$tmp/b2.yaml" "if (d.kind === 'Role') for (const r of d.rules) r.resources = r.resources.filter((x) => x !== 'statefulsets/scale');"
    expect_reject "RBAC without statefulsets/scale" manifests "$tmp/b2.yaml" "RBAC"
    mutate "$base" "$tmp/b3.yaml" "if (d.kind === 'Deployment' && d.metadata.name === 'tandem-prefiller') delete d.spec.template.spec.containers[0].readinessProbe;"
    expect_reject "a container without a readiness probe" manifests "$tmp/b3.yaml" "probes"
    mutate "$base" "$tmp/b4.yaml" "if (d.kind === 'StatefulSet') d.spec.selector.matchLabels['app.kubernetes.io/name'] = 'someone-else';"
    expect_reject "a selector that does not match its pods" manifests "$tmp/b4.yaml" "selectors"
    mutate "$base" "$tmp/b5.yaml" "if (d.kind === 'StatefulSet') d.spec.template.spec.containers[0].env.find((e) => e.name === 'TANDEM_DECODER_PODS_PER_GROUP').value = '5';"
    expect_reject "a decoder group over 16 GPUs" manifests "$tmp/b5.yaml" "GPU"
    mutate "$base" "$tmp/b6.yaml" "if (d.kind === 'PrometheusRule') d.spec.groups[0].rules[0].expr = 'tandem_not_a_metric > 1';"
    expect_reject "an alert on an undocumented metric" manifests "$tmp/b6.yaml" "documented metrics"
    mutate "$base" "$tmp/b7.yaml" "if (d.kind === 'Deployment' && d.metadata.name === 'tandem-prefiller') d.spec.template.spec.containers[0].args = d.spec.template.spec.containers[0].args.map((a) => a === '--device=cuda' ? '--device=cpu' : a);"
    expect_reject "a GPU overlay's prefiller on the CPU backend" manifests "$tmp/b7.yaml" "cuda backend"
    mutate "$base" "$tmp/b8.yaml" "if (d.kind === 'StatefulSet') for (const k of ['requests', 'limits']) d.spec.template.spec.containers[0].resources[k]['nvidia.com/gpu'] = 2;"
    expect_reject "a decoder pod with fewer GPUs than ranks" manifests "$tmp/b8.yaml" "one GPU per rank"
    mutate "$base" "$tmp/b9.yaml" "if (d.kind === 'Deployment' && d.metadata.name === 'tandem-router') d.spec.template.spec.containers[0].image = 'tandem:dev';"
    expect_reject "a container on another image" manifests "$tmp/b9.yaml" "runs the image"
    mutate "$base" "$tmp/b10.yaml" "if (d.kind === 'ConfigMap' && d.data && d.data['model.conf']) d.data['model.conf'] = 'tokenizer = /opt/tandem/vocab/gpt-tokenizer/data/o200k_base.tiktoken\\n';"
    expect_reject "a Qwen3 model with the GPT-OSS vocabulary" manifests "$tmp/b10.yaml" "vocabulary"
    mutate "$base" "$tmp/b11.yaml" "if (d.kind === 'ConfigMap' && d.data && d.data.TANDEM_WEIGHTS) d.data.TANDEM_WEIGHTS = 'bf16';"
    expect_reject "Qwen3-235B-A22B in bf16" manifests "$tmp/b11.yaml" "one GPU per rank"
    mutate "$base" "$tmp/b12.yaml" "if (d.kind === 'StatefulSet') d.spec.template.spec.containers[0].env = d.spec.template.spec.containers[0].env.filter((e) => e.name !== 'NCCL_DEBUG');"
    expect_reject "a decoder without NCCL_DEBUG=WARN" manifests "$tmp/b12.yaml" "NCCL"
    mutate "$base" "$tmp/b13.yaml" "if (d.kind === 'StatefulSet') d.spec.template.spec.containers[0].args = d.spec.template.spec.containers[0].args.filter((a) => !a.startsWith('--config='));"
    expect_reject "a decoder without the router's vocabulary" manifests "$tmp/b13.yaml" "vocabulary \\(model.conf\\)"
else
    notok "gb200 render available for the validator's negative tests"
fi
sed 's/tandem_kv_cache_occupancy_ratio/tandem_kv_cache_fullness/' deploy/grafana/tandem-dashboard.json >"$tmp/dash.json"
expect_reject "a dashboard query on an undocumented metric" dashboard "$tmp/dash.json" "documented in METRICS.md"
exit $failed
