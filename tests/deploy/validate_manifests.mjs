// Validates rendered Kubernetes manifests (the output of `kubectl kustomize`)
// and the Grafana dashboard, offline. Prints one TAP line per check and exits
// non-zero when any fails.
//
//   node validate_manifests.mjs --metrics docs/METRICS.md \
//        [--manifests NAME=rendered.yaml ...] [--dashboard dashboard.json]
//
// Schema validation uses the OpenAPI-derived validators shipped in the npm
// packages kubernetes-models (core kinds), @kubernetes-models/keda and
// @kubernetes-models/prometheus-operator (CRDs). On top of the schemas it
// checks what a schema cannot: selectors against pod labels, probes, GPU and
// RDMA requests, references between objects, that the RBAC covers the scale
// subresources the router's kubernetes scaler patches, and that every metric
// named in rules, autoscalers and the dashboard is documented in METRICS.md.
import fs from "node:fs";
import yaml from "js-yaml";

let failures = 0;
function check(name, ok, detail) {
    if (ok) {
        console.log(`ok - ${name}`);
    } else {
        failures++;
        console.log(`not ok - ${name}`);
        if (detail) for (const line of String(detail).split("\n")) console.log(`# ${line}`);
    }
}

// ---------------------------------------------------------------- metrics --

// Metric names and types from the tables of docs/METRICS.md:
// | `tandem_name` | type | labels | meaning |
function loadMetrics(path) {
    const metrics = new Map();
    for (const line of fs.readFileSync(path, "utf8").split("\n")) {
        const m = line.match(/^\|\s*`(tandem_[a-z0-9_]+)`\s*\|\s*(counter|gauge|histogram|summary)\s*\|/);
        if (m) metrics.set(m[1], m[2]);
    }
    return metrics;
}

// Names used in a PromQL expression that are not documented. Histogram
// series may carry _bucket/_sum/_count; `up` is Prometheus's own.
function undocumentedMetrics(expr, metrics) {
    const bad = [];
    for (const [name] of expr.matchAll(/\btandem_[a-z0-9_]+\b/g)) {
        if (metrics.has(name)) continue;
        const h = name.match(/^(.*)_(bucket|sum|count)$/);
        if (h && metrics.get(h[1]) === "histogram") continue;
        bad.push(name);
    }
    return bad;
}

// ------------------------------------------------------------------ schema --

function modelPath(apiVersion, kind) {
    if (apiVersion.startsWith("monitoring.coreos.com/"))
        return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
    if (apiVersion.startsWith("keda.sh/")) return `@kubernetes-models/keda/${apiVersion}/${kind}`;
    return `kubernetes-models/${apiVersion}/${kind}`;
}

const KNOWN_KINDS = new Set([
    "Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment",
    "StatefulSet", "ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler", "ScaledObject",
]);

async function schemaErrors(doc) {
    let mod;
    try {
        mod = await import(modelPath(doc.apiVersion, doc.kind));
    } catch (e) {
        return `no schema for ${doc.apiVersion} ${doc.kind}`;
    }
    const Model = mod[doc.kind];
    if (!Model) return `no model ${doc.kind} in ${modelPath(doc.apiVersion, doc.kind)}`;
    try {
        new Model(doc).validate();
        return null;
    } catch (e) {
        return e.message;
    }
}

// ------------------------------------------------------------ structure --

const key = (d) => `${d.kind}/${d.metadata?.namespace ?? ""}/${d.metadata?.name}`;
const subset = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => (labels || {})[k] === v);
const envOf = (c) => Object.fromEntries((c.env || []).filter((e) => "value" in e).map((e) => [e.name, e.value]));

function containerIssues(w) {
    const issues = [];
    const pod = w.spec.template.spec;
    for (const c of pod.containers || []) {
        const where = `${w.kind} ${w.metadata.name} container ${c.name}`;
        const req = c.resources?.requests || {};
        if (!req.cpu || !req.memory) issues.push(`${where}: resources.requests.cpu/memory missing`);
        const ports = new Set((c.ports || []).flatMap((p) => [p.name, p.containerPort]));
        for (const probe of ["readinessProbe", "livenessProbe"]) {
            const p = c[probe];
            if (!p) {
                issues.push(`${where}: no ${probe}`);
                continue;
            }
            if (!p.httpGet || !String(p.httpGet.path).startsWith("/healthz"))
                issues.push(`${where}: ${probe} is not an HTTP GET on /healthz`);
            else if (!ports.has(p.httpGet.port)) issues.push(`${where}: ${probe} port ${p.httpGet.port} is not a container port`);
        }
    }
    return issues;
}

function gpusOf(c, which = "requests") {
    return Number(c.resources?.[which]?.["nvidia.com/gpu"] ?? 0);
}

async function validateRender(name, file, metrics) {
    let docs;
    try {
        docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d !== null);
        check(`${name}: renders to YAML that parses (${docs.length} objects)`, docs.length > 0);
    } catch (e) {
        check(`${name}: renders to YAML that parses`, false, e.message);
        return;
    }
    const basics = docs.filter((d) => !(typeof d === "object" && d.apiVersion && d.kind && d.metadata?.name));
    check(`${name}: every object has apiVersion, kind and metadata.name`, basics.length === 0,
        basics.map((d) => JSON.stringify(d).slice(0, 120)).join("\n"));
    const unknown = docs.filter((d) => !KNOWN_KINDS.has(d.kind)).map((d) => `${d.apiVersion} ${d.kind}`);
    check(`${name}: only known kinds`, unknown.length === 0, unknown.join("\n"));
    const seen = new Set(), dups = [];
    for (const d of docs) {
        if (seen.has(key(d))) dups.push(key(d));
        seen.add(key(d));
    }
    check(`${name}: no duplicate objects`, dups.length === 0, dups.join("\n"));
    const schemaIssues = [];
    for (const d of docs) {
        const e = await schemaErrors(d);
        if (e) schemaIssues.push(`${d.kind} ${d.metadata?.name}: ${e}`);
    }
    check(`${name}: every object validates against its Kubernetes/CRD schema`, schemaIssues.length === 0,
        schemaIssues.join("\n"));
    const namespaced = docs.filter((d) => !["Namespace"].includes(d.kind));
    const nss = new Set(namespaced.map((d) => d.metadata.namespace));
    check(`${name}: all namespaced objects share one namespace (${[...nss].join(",")})`,
        nss.size === 1 && !nss.has(undefined));

    const byKind = (k) => docs.filter((d) => d.kind === k);
    const workloads = [...byKind("Deployment"), ...byKind("StatefulSet")];
    const find = (kind, n) => docs.find((d) => d.kind === kind && d.metadata.name === n);

    const selIssues = workloads
        .filter((w) => !subset(w.spec.selector?.matchLabels, w.spec.template.metadata?.labels) ||
                       Object.keys(w.spec.selector?.matchLabels || {}).length === 0)
        .map((w) => `${w.kind} ${w.metadata.name}: selector ${JSON.stringify(w.spec.selector)} does not match template labels`);
    check(`${name}: workload selectors match their pod labels`, selIssues.length === 0, selIssues.join("\n"));
    const cIssues = workloads.flatMap(containerIssues);
    check(`${name}: containers have resource requests and /healthz readiness and liveness probes`,
        cIssues.length === 0, cIssues.join("\n"));

    const svcIssues = [];
    for (const s of byKind("Service")) {
        const targets = workloads.filter((w) => subset(s.spec.selector, w.spec.template.metadata.labels));
        if (!s.spec.selector || targets.length === 0) {
            svcIssues.push(`Service ${s.metadata.name}: selector matches no workload's pods`);
            continue;
        }
        const ports = new Set(targets.flatMap((w) => w.spec.template.spec.containers.flatMap((c) =>
            (c.ports || []).flatMap((p) => [p.name, p.containerPort]))));
        for (const p of s.spec.ports || [])
            if (!ports.has(p.targetPort ?? p.port))
                svcIssues.push(`Service ${s.metadata.name}: targetPort ${p.targetPort} is not a container port`);
    }
    for (const st of byKind("StatefulSet")) {
        const hs = find("Service", st.spec.serviceName);
        if (!hs || hs.spec.clusterIP !== "None")
            svcIssues.push(`StatefulSet ${st.metadata.name}: serviceName ${st.spec.serviceName} is not a headless Service here`);
    }
    check(`${name}: Service selectors and ports match workloads; StatefulSets have their headless Service`,
        svcIssues.length === 0, svcIssues.join("\n"));

    const refIssues = [];
    for (const w of workloads) {
        const pod = w.spec.template.spec;
        for (const v of pod.volumes || [])
            if (v.configMap && !find("ConfigMap", v.configMap.name))
                refIssues.push(`${w.metadata.name}: volume ${v.name} uses missing ConfigMap ${v.configMap.name}`);
        for (const c of pod.containers)
            for (const ef of c.envFrom || [])
                if (ef.configMapRef && !find("ConfigMap", ef.configMapRef.name))
                    refIssues.push(`${w.metadata.name}: envFrom uses missing ConfigMap ${ef.configMapRef.name}`);
        if (pod.serviceAccountName && !find("ServiceAccount", pod.serviceAccountName))
            refIssues.push(`${w.metadata.name}: ServiceAccount ${pod.serviceAccountName} missing`);
    }
    check(`${name}: ConfigMaps and ServiceAccounts referenced by pods exist`, refIssues.length === 0, refIssues.join("\n"));

    // GPU layout: prefiller = one 4-GPU TP=4 node with an RDMA device;
    // decoder group = pods_per_group * gpus_per_pod <= 16 GPUs.
    const pre = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "prefiller");
    const dec = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "decoder");
    const gpuIssues = [];
    if (!pre || !dec) gpuIssues.push("no prefiller or decoder workload");
    let podsPerGroup = 1, decKind = null, decName = null, preName = null;
    if (pre && dec) {
        preName = pre.metadata.name;
        decName = dec.metadata.name;
        decKind = dec.kind;
        const pc = pre.spec.template.spec.containers[0], dc = dec.spec.template.spec.containers[0];
        if (gpusOf(pc) !== 4) gpuIssues.push(`prefiller requests ${gpusOf(pc)} GPUs, want 4 (TP=4 node)`);
        for (const [w, c] of [[pre, pc], [dec, dc]]) {
            if (gpusOf(c) !== gpusOf(c, "limits")) gpuIssues.push(`${w.metadata.name}: GPU requests != limits`);
            const rdma = Object.keys(c.resources?.requests || {}).filter((r) => r.startsWith("rdma/"));
            if (rdma.length === 0) gpuIssues.push(`${w.metadata.name}: no RDMA extended resource requested`);
        }
        const env = envOf(dc);
        podsPerGroup = Number(env.TANDEM_DECODER_PODS_PER_GROUP);
        const perPod = Number(env.TANDEM_DECODER_GPUS_PER_POD);
        if (!(podsPerGroup >= 1) || perPod !== gpusOf(dc))
            gpuIssues.push(`decoder env PODS_PER_GROUP=${env.TANDEM_DECODER_PODS_PER_GROUP} GPUS_PER_POD=${env.TANDEM_DECODER_GPUS_PER_POD} vs ${gpusOf(dc)} GPUs requested`);
        if (podsPerGroup * perPod > 16) gpuIssues.push(`decoder group spans ${podsPerGroup * perPod} GPUs, more than 16`);
        if ((dec.spec.replicas ?? 1) % podsPerGroup !== 0)
            gpuIssues.push(`decoder replicas ${dec.spec.replicas} is not a multiple of the group size ${podsPerGroup}`);
        const routerEnv = byKind("ConfigMap").find((c) => c.data?.TANDEM_DECODE_PODS_PER_REPLICA !== undefined);
        if (!routerEnv || Number(routerEnv.data.TANDEM_DECODE_PODS_PER_REPLICA) !== podsPerGroup)
            gpuIssues.push(`router's TANDEM_DECODE_PODS_PER_REPLICA (${routerEnv?.data?.TANDEM_DECODE_PODS_PER_REPLICA}) != decoder group size ${podsPerGroup}`);
    }
    check(`${name}: GPU/RDMA requests and decoder group layout are consistent`, gpuIssues.length === 0, gpuIssues.join("\n"));

    // RBAC: what the router's scaler patches (router.conf scaler-k8s-*) must
    // be granted to the router's ServiceAccount through a RoleBinding.
    const rbacIssues = [];
    const router = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "router");
    const conf = byKind("ConfigMap").map((c) => c.data?.["router.conf"]).find((x) => x) || "";
    const targets = [...conf.matchAll(/^\s*scaler-k8s-(prefill|decode)\s*=\s*(deployments|statefulsets)\/(\S+)/gm)]
        .map((m) => ({ pool: m[1], resource: m[2], name: m[3] }));
    if (!router) rbacIssues.push("no router workload");
    if (targets.length !== 2) rbacIssues.push(`router.conf names ${targets.length} scaler targets, want prefill and decode`);
    for (const t of targets) {
        const kind = t.resource === "deployments" ? "Deployment" : "StatefulSet";
        if (!find(kind, t.name)) rbacIssues.push(`scaler target ${t.resource}/${t.name} is not in the render`);
        const want = t.pool === "prefill" ? [preName, pre?.kind] : [decName, decKind];
        if (t.name !== want[0] || kind !== want[1]) rbacIssues.push(`scaler ${t.pool} target ${t.resource}/${t.name} is not the ${t.pool} workload ${want[1]}/${want[0]}`);
    }
    const sa = router?.spec.template.spec.serviceAccountName;
    const rules = byKind("RoleBinding")
        .filter((b) => (b.subjects || []).some((s) => s.kind === "ServiceAccount" && s.name === sa))
        .flatMap((b) => (b.roleRef.kind === "Role" ? find("Role", b.roleRef.name)?.rules || [] : []));
    for (const t of targets)
        for (const verb of ["get", "patch"]) {
            const ok = rules.some((r) => (r.apiGroups || []).includes("apps") &&
                (r.resources || []).includes(`${t.resource}/scale`) &&
                (r.verbs || []).some((v) => v === verb || v === "*") &&
                (!r.resourceNames || r.resourceNames.includes(t.name)));
            if (!ok) rbacIssues.push(`ServiceAccount ${sa} may not ${verb} apps ${t.resource}/scale of ${t.name}`);
        }
    check(`${name}: RBAC lets the router's ServiceAccount get and patch the scale subresources it targets`,
        rbacIssues.length === 0, rbacIssues.join("\n"));

    // Autoscaler objects and monitoring.
    const asIssues = [];
    for (const h of byKind("HorizontalPodAutoscaler")) {
        if (!find(h.spec.scaleTargetRef.kind, h.spec.scaleTargetRef.name))
            asIssues.push(`HPA ${h.metadata.name}: target ${h.spec.scaleTargetRef.kind}/${h.spec.scaleTargetRef.name} missing`);
        for (const m of h.spec.metrics || []) {
            const mn = m.external?.metric?.name;
            if (mn !== "tandem_pool_desired_replicas") asIssues.push(`HPA ${h.metadata.name}: external metric ${mn} is not tandem_pool_desired_replicas`);
            if (mn && !metrics.has(mn)) asIssues.push(`HPA ${h.metadata.name}: metric ${mn} not in METRICS.md`);
        }
    }
    for (const so of byKind("ScaledObject")) {
        const ref = so.spec.scaleTargetRef;
        if (!find(ref.kind || "Deployment", ref.name)) asIssues.push(`ScaledObject ${so.metadata.name}: target ${ref.kind}/${ref.name} missing`);
        for (const t of so.spec.triggers || []) {
            const bad = undocumentedMetrics(t.metadata?.query || "", metrics);
            if (!/tandem_pool_desired_replicas/.test(t.metadata?.query || "")) asIssues.push(`ScaledObject ${so.metadata.name}: query does not use tandem_pool_desired_replicas`);
            if (bad.length) asIssues.push(`ScaledObject ${so.metadata.name}: undocumented metrics ${bad.join(", ")}`);
        }
    }
    for (const r of byKind("PrometheusRule"))
        for (const g of r.spec.groups || [])
            for (const rule of g.rules || []) {
                const bad = undocumentedMetrics(String(rule.expr), metrics);
                if (bad.length) asIssues.push(`rule ${rule.alert || rule.record}: undocumented metrics ${bad.join(", ")}`);
            }
    for (const sm of byKind("ServiceMonitor")) {
        const svc = byKind("Service").find((s) => subset(sm.spec.selector.matchLabels, s.metadata.labels));
        if (!svc) asIssues.push(`ServiceMonitor ${sm.metadata.name}: selects no Service`);
        else for (const ep of sm.spec.endpoints || [])
            if (!(svc.spec.ports || []).some((p) => p.name === ep.port))
                asIssues.push(`ServiceMonitor ${sm.metadata.name}: Service ${svc.metadata.name} has no port ${ep.port}`);
    }
    check(`${name}: autoscalers target real workloads; rules and triggers use documented metrics`,
        asIssues.length === 0, asIssues.join("\n"));
    if (name.includes("hpa")) check(`${name}: has HorizontalPodAutoscalers for both pools`, byKind("HorizontalPodAutoscaler").length === 2);
    if (name.includes("keda")) check(`${name}: has KEDA ScaledObjects for both pools`, byKind("ScaledObject").length === 2);
    const alerts = byKind("PrometheusRule").flatMap((r) => r.spec.groups.flatMap((g) => g.rules.map((x) => x.alert)));
    const wanted = ["TandemHighTimeToFirstToken", "TandemPrefillQueueDeep", "TandemReplicasNotConverged", "TandemWorkerDown"];
    check(`${name}: alerts for TTFT, queue depth, desired != ready and worker down`,
        wanted.every((a) => alerts.includes(a)), `have: ${alerts.join(", ")}`);
}

function validateDashboard(file, metrics) {
    let dash;
    try {
        dash = JSON.parse(fs.readFileSync(file, "utf8"));
        check("dashboard: JSON parses", true);
    } catch (e) {
        check("dashboard: JSON parses", false, e.message);
        return;
    }
    const panels = (dash.panels || []).flatMap((p) => [p, ...(p.panels || [])]);
    const ids = panels.map((p) => p.id);
    check("dashboard: panel ids are unique", new Set(ids).size === ids.length);
    const exprs = panels.flatMap((p) => (p.targets || []).map((t) => ({ title: p.title, expr: t.expr })));
    const bad = exprs.flatMap(({ title, expr }) => undocumentedMetrics(expr || "", metrics).map((m) => `${title}: ${m}`));
    check(`dashboard: all ${exprs.length} queries use only metrics documented in METRICS.md`,
        exprs.length > 0 && bad.length === 0, bad.join("\n"));
    const titles = panels.map((p) => (p.title || "").toLowerCase()).join(" | ");
    const topics = ["input tokens/s", "time to first token", "inter-token latency", "batch size", "kv cache", "desired vs current", "outcome"];
    const missing = topics.filter((t) => !titles.includes(t));
    check("dashboard: panels for input tokens/s, TTFT, ITL, batch sizes, KV occupancy, replicas, outcomes",
        missing.length === 0, `missing: ${missing.join(", ")}`);
    const histPanels = panels.filter((p) => p.type === "heatmap").map((p) => p.title.toLowerCase());
    check("dashboard: TTFT and ITL histograms (heatmaps)",
        histPanels.some((t) => t.includes("first token")) && histPanels.some((t) => t.includes("inter-token")));
}

// ------------------------------------------------------------------- main --

const args = process.argv.slice(2);
let metricsPath = null, dashboard = null;
const renders = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--metrics") metricsPath = args[++i];
    else if (args[i] === "--dashboard") dashboard = args[++i];
    else if (args[i] === "--manifests") {
        const [n, f] = args[++i].split("=");
        renders.push([n, f]);
    } else {
        console.error(`validate_manifests: unknown argument ${args[i]}`);
        process.exit(2);
    }
}
if (!metricsPath) {
    console.error("usage: validate_manifests.mjs --metrics METRICS.md [--manifests NAME=FILE ...] [--dashboard FILE]");
    process.exit(2);
}
const metrics = loadMetrics(metricsPath);
check(`METRICS.md documents the metrics (${metrics.size} names, tandem_pool_desired_replicas among them)`,
    metrics.size >= 20 && metrics.has("tandem_pool_desired_replicas"));
for (const [n, f] of renders) await validateRender(n, f, metrics);
if (dashboard) validateDashboard(dashboard, metrics);
process.exit(failures ? 1 : 0);
