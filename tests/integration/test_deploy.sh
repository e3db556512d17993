#!/usr/bin/env bash
# deploy/: renders every kustomize overlay (and the Grafana dashboard
# ConfigMap) with `kubectl kustomize`, validates the output offline against
# the Kubernetes/KEDA/Prometheus Operator schemas and Tandem's own consistency
# rules (tests/deploy/validate_manifests.mjs), and checks that the validator
# really rejects broken manifests. Prints TAP lines. Needs `make deps`
# (kubectl, and the validator's npm packages under tests/deploy/node_modules).
set -u
VALIDATOR_DIR=tests/deploy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
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
[ ${#args[@]} -ge 8 ] && ok "at least four overlays rendered" || notok "at least four overlays rendered"

if kubectl kustomize deploy/grafana >"$tmp/grafana.yaml" 2>"$tmp/grafana.err" &&
    grep -q 'name: tandem-grafana-dashboard' "$tmp/grafana.yaml" && grep -q 'grafana_dashboard: "1"' "$tmp/grafana.yaml"; then
    ok "kubectl kustomize deploy/grafana gives the labelled dashboard ConfigMap"
else
    notok "kubectl kustomize deploy/grafana gives the labelled dashboard ConfigMap" "$tmp/grafana.err"
fi

# The validator prints its own TAP lines.
node "$VALIDATOR_DIR/validate_manifests.mjs" --metrics docs/METRICS.md "${args[@]}" \
    --dashboard deploy/grafana/tandem-dashboard.json || failed=1

# --- the validator must catch real mistakes ---------------------------------
# expect_reject NAME FILE-KIND FILE PATTERN: run the validator on a broken
# copy; it must fail with a "not ok" line matching PATTERN.
expect_reject() {
    local what=$1 kind=$2 file=$3 pattern=$4 out=$tmp/reject.out
    if [ "$kind" = manifests ]; then
        node "$VALIDATOR_DIR/validate_manifests.mjs" --metrics docs/METRICS.md --manifests "broken=$file" >"$out" 2>&1
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
else
    notok "gb200 render available for the validator's negative tests"
fi
sed 's/tandem_kv_cache_occupancy_ratio/tandem_kv_cache_fullness/' deploy/grafana/tandem-dashboard.json >"$tmp/dash.json"
expect_reject "a dashboard query on an undocumented metric" dashboard "$tmp/dash.json" "documented in METRICS.md"
exit $failed
