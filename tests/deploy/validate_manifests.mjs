// Validates rendered Kubernetes manifests (the output of `kubectl kustomize`)
// and the Grafana dashboard, offline. Prints one TAP line per check and exits
// non-zero when any fails.
//
//   node validate_manifests.mjs --metrics docs/METRICS.md \
//        [--manifests NAME=rendered.yaml ...] [--dashboard dashboard.json] \
//        [--image NAME:TAG] [--vocab-root vocab] [--dockerfile Dockerfile]
//
// --image: every container must run it; --vocab-root / --dockerfile: the
// vocabulary the router's model.conf names (under /opt/tandem/vocab in the
// image) must exist there and be copied in by the Dockerfile. A render
// named cpu* must run the CPU backend, every other the GPU backend.
//
// Schema validation uses the OpenAPI-derived validators shipped in the npm
// packages kubernetes-models (core kinds), @kubernetes-models/keda and
// @kubernetes-models/prometheus-operator (CRDs). On top of the schemas it
// checks what a schema cannot: selectors against pod labels, probes, the
// backend with one GPU per rank and its RDMA/NCCL/UCX settings, the router's
// vocabulary, references between objects, that the RBAC covers the scale
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
    if (pod.securityContext?.runAsNonRoot !== true)
        issues.push(`${w.kind} ${w.metadata.name}: pod securityContext.runAsNonRoot is not true`);
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

// A container's --name=value flags, with Kubernetes' $(VAR) references
// resolved from its env values and the ConfigMaps of its envFrom.
function argsOf(c, docs) {
    const vars = {};
    for (const ef of c.envFrom || []) {
        const cm = docs.find((d) => d.kind === "ConfigMap" && d.metadata.name === ef.configMapRef?.name);
        Object.assign(vars, cm?.data || {});
    }
    Object.assign(vars, envOf(c));
    const out = {};
    for (const a of c.args || []) {
        const m = String(a).match(/^--([a-z0-9-]+)=(.*)$/);
        if (m) out[m[1]] = m[2].replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (x, v) => (v in vars ? vars[v] : x));
    }
    return out;
}

function gpusOf(c, which = "requests") {
    return Number(c.resources?.[which]?.["nvidia.com/gpu"] ?? 0);
}

async function validateRender(name, file, metrics, opts) {
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
    check(`${name}: pods run as non-root; containers have resource requests and /healthz readiness and liveness probes`,
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

    // Worker layout: one rank per GPU. On the GPU backend (every overlay
    // but cpu*: --device=cuda) the prefiller asks for --tp GPUs and the
    // decoder pod for its share of the --dp group (GPUS_PER_POD), with an
    // RDMA device, the NCCL variables, UCX transports for GPU memory and a
    // memory-backed /dev/shm; on the CPU backend no GPU at all. The two big
    // models run in FP8. A decoder group spans at most 16 GPUs.
    const pre = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "prefiller");
    const dec = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "decoder");
    const router = workloads.find((w) => w.spec.template.metadata.labels?.["app.kubernetes.io/component"] === "router");
    const wantDevice = name.startsWith("cpu") ? "cpu" : "cuda";
    const gpuIssues = [];
    if (!pre || !dec) gpuIssues.push("no prefiller or decoder workload");
    let podsPerGroup = 1, decKind = null, decName = null, preName = null;
    if (pre && dec) {
        preName = pre.metadata.name;
        decName = dec.metadata.name;
        decKind = dec.kind;
        const pc = pre.spec.template.spec.containers[0], dc = dec.spec.template.spec.containers[0];
        const pa = argsOf(pc, docs), da = argsOf(dc, docs);
        const env = envOf(dc);
        podsPerGroup = Number(env.TANDEM_DECODER_PODS_PER_GROUP);
        const perPod = Number(env.TANDEM_DECODER_GPUS_PER_POD);
        const tp = Number(pa.tp ?? 1), dp = Number(da.dp ?? 1);
        if (!(podsPerGroup >= 1) || !(perPod >= 1))
            gpuIssues.push(`decoder env PODS_PER_GROUP=${env.TANDEM_DECODER_PODS_PER_GROUP} GPUS_PER_POD=${env.TANDEM_DECODER_GPUS_PER_POD}: want positive integers`);
        if (dp !== podsPerGroup * perPod)
            gpuIssues.push(`decoder --dp=${da.dp} != ${podsPerGroup} pods x ${perPod} ranks per pod`);
        if (Number(pa.ep ?? 1) < 1 || tp % Number(pa.ep ?? 1) !== 0) gpuIssues.push(`prefiller --ep=${pa.ep} does not divide --tp=${tp}`);
        if (Number(da.ep ?? 1) < 1 || dp % Number(da.ep ?? 1) !== 0) gpuIssues.push(`decoder --ep=${da.ep} does not divide --dp=${dp}`);
        if (!(dc.command || []).includes("tandem-decoder-pod"))
            gpuIssues.push(`decoder command ${JSON.stringify(dc.command)} is not tandem-decoder-pod (ranks from the ordinal)`);
        for (const [w, c, a, ranks] of [[pre, pc, pa, tp], [dec, dc, da, perPod]]) {
            const wn = w.metadata.name, e = envOf(c);
            const device = String(a.device ?? "cpu");
            if (!(device === wantDevice || device.startsWith(`${wantDevice}:`)))
                gpuIssues.push(`${wn}: --device=${device}, want ${wantDevice} in overlay ${name}`);
            if (gpusOf(c) !== gpusOf(c, "limits")) gpuIssues.push(`${wn}: GPU requests != limits`);
            const model = String(a["model-name"] ?? "");
            if (!model || String(a.model) !== `/models/${model}`)
                gpuIssues.push(`${wn}: --model=${a.model} --model-name=${a["model-name"]}: want /models/NAME and NAME`);
            if (/^(gpt-oss-120b|qwen3-235b)/i.test(model) && a.weights !== "fp8")
                gpuIssues.push(`${wn}: ${model} with --weights=${a.weights}, want fp8`);
            if (wantDevice === "cpu") {
                if (gpusOf(c) !== 0) gpuIssues.push(`${wn}: requests ${gpusOf(c)} GPUs on the CPU backend`);
                continue;
            }
            if (gpusOf(c) !== ranks) gpuIssues.push(`${wn}: requests ${gpusOf(c)} GPUs for ${ranks} ranks (one GPU per rank)`);
            const rdma = Object.keys(c.resources?.requests || {}).filter((r) => r.startsWith("rdma/"));
            if (rdma.length === 0) gpuIssues.push(`${wn}: no RDMA extended resource requested`);
            for (const v of ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"])
                if (!e[v]) gpuIssues.push(`${wn}: ${v} not set`);
            if (e.NCCL_DEBUG !== "WARN") gpuIssues.push(`${wn}: NCCL_DEBUG=${e.NCCL_DEBUG}, want WARN`);
            const tls = String(e.UCX_TLS || "").split(",");
            for (const t of ["rc", "cuda_copy", "cuda_ipc"])
                if (!tls.includes(t)) gpuIssues.push(`${wn}: UCX_TLS=${e.UCX_TLS} lacks ${t}`);
            const shm = (c.volumeMounts || []).find((m) => m.mountPath === "/dev/shm");
            const vol = shm && (w.spec.template.spec.volumes || []).find((v) => v.name === shm.name);
            if (!vol || vol.emptyDir?.medium !== "Memory") gpuIssues.push(`${wn}: /dev/shm is not a memory-backed emptyDir`);
        }
        if (podsPerGroup * perPod > 16) gpuIssues.push(`decoder group spans ${podsPerGroup * perPod} GPUs, more than 16`);
        if ((dec.spec.replicas ?? 1) % podsPerGroup !== 0)
            gpuIssues.push(`decoder replicas ${dec.spec.replicas} is not a multiple of the group size ${podsPerGroup}`);
        const routerEnv = byKind("ConfigMap").find((c) => c.data?.TANDEM_DECODE_PODS_PER_REPLICA !== undefined);
        if (!routerEnv || Number(routerEnv.data.TANDEM_DECODE_PODS_PER_REPLICA) !== podsPerGroup)
            gpuIssues.push(`router's TANDEM_DECODE_PODS_PER_REPLICA (${routerEnv?.data?.TANDEM_DECODE_PODS_PER_REPLICA}) != decoder group size ${podsPerGroup}`);
    }
    check(`${name}: ${wantDevice} backend, one GPU per rank, GPU/RDMA/NCCL settings and decoder group layout are consistent`,
        gpuIssues.length === 0, gpuIssues.join("\n"));

    // Image: every container runs the one image name:tag (--image, from the
    // base kustomization's images: entry through `make print-image`).
    if (opts.image) {
        const bad = workloads.flatMap((w) => w.spec.template.spec.containers
            .filter((c) => c.image !== opts.image).map((c) => `${w.metadata.name}/${c.name}: ${c.image}`));
        check(`${name}: every container runs the image ${opts.image}`, bad.length === 0, bad.join("\n"));
    }

    // Tokenizer: the router reads router.conf and model.conf from its
    // ConfigMap; model.conf names the vocabulary of the workers' model (the
    // chat format follows from it), at a path inside the image's vocabulary
    // folder, which the Dockerfile fills from the same vocab/ files.
    const tokIssues = [];
    const routerC = router?.spec.template.spec.containers[0];
    const confMap = byKind("ConfigMap").find((c) => c.data?.["router.conf"] !== undefined);
    const confVol = (router?.spec.template.spec.volumes || []).find((v) => v.configMap && v.configMap.name === confMap?.metadata.name);
    const mount = (routerC?.volumeMounts || []).find((m) => m.name === confVol?.name);
    for (const key of ["router.conf", "model.conf"]) {
        if (confMap?.data?.[key] === undefined) tokIssues.push(`router ConfigMap has no ${key}`);
        if (confVol?.configMap.items && !confVol.configMap.items.some((i) => i.key === key && i.path === key))
            tokIssues.push(`router config volume does not project ${key}`);
        if (!mount || !(routerC.args || []).includes(`--config=${mount.mountPath}/${key}`))
            tokIssues.push(`router args do not read --config=${mount?.mountPath}/${key}`);
    }
    const tokenizers = [...String(confMap?.data?.["model.conf"] ?? "").matchAll(/^\s*tokenizer\s*=\s*(\S+)\s*$/gm)].map((m) => m[1]);
    const served = pre ? String(argsOf(pre.spec.template.spec.containers[0], docs)["model-name"] ?? "") : "";
    if (tokenizers.length !== 1) tokIssues.push(`model.conf names ${tokenizers.length} tokenizers, want 1`);
    else {
        const tok = tokenizers[0];
        const family = /^gpt-oss/i.test(served) ? "o200k_base.tiktoken" : /^qwen3/i.test(served) ? "tokenizer.json" : null;
        if (!family) tokIssues.push(`no known vocabulary for the served model '${served}'`);
        else if (!tok.endsWith(`/${family}`) || (family === "tokenizer.json" && !/qwen3/.test(tok)))
            tokIssues.push(`tokenizer ${tok} is not the ${served} vocabulary (${family})`);
        if (!tok.startsWith(`${opts.imageVocab}/`)) tokIssues.push(`tokenizer ${tok} is not under the image's ${opts.imageVocab}`);
        const rel = tok.slice(opts.imageVocab.length + 1);
        if (opts.vocabRoot && !fs.existsSync(`${opts.vocabRoot}/${rel}`))
            tokIssues.push(`tokenizer ${tok}: ${opts.vocabRoot}/${rel} does not exist (make deps)`);
        if (opts.dockerfile) {
            const dir = rel.slice(0, rel.lastIndexOf("/"));
            const copy = new RegExp(`^COPY\\s+vocab/${rel.replace(/[.]/g, "\\.")}\\s+${opts.imageVocab}/${dir}/?\\s*$`, "m");
            if (!copy.test(fs.readFileSync(opts.dockerfile, "utf8")))
                tokIssues.push(`${opts.dockerfile} does not COPY vocab/${rel} to ${opts.imageVocab}/${dir}/`);
        }
    }
    check(`${name}: the router's model.conf names the vocabulary of ${served || "the served model"}, in the image`,
        tokIssues.length === 0, tokIssues.join("\n"));

    // Structured outputs mask the logits on the workers, over the router's
    // vocabulary: each worker reads the same model.conf (its tokenizer line)
    // from the same ConfigMap, and passes no other --tokenizer.
    const workerTokIssues = [];
    for (const [role, w] of [["prefiller", pre], ["decoder", dec]]) {
        const c = w?.spec.template.spec.containers[0];
        if (!c) { workerTokIssues.push(`no ${role}`); continue; }
        const vol = (w.spec.template.spec.volumes || []).find((v) => v.configMap && v.configMap.name === confMap?.metadata.name);
        const m = (c.volumeMounts || []).find((x) => x.name === vol?.name);
        if (!vol) workerTokIssues.push(`${role}: no volume of the ConfigMap ${confMap?.metadata.name}`);
        else if (vol.configMap.items && !vol.configMap.items.some((i) => i.key === "model.conf" && i.path === "model.conf"))
            workerTokIssues.push(`${role}: its config volume does not project model.conf`);
        if (!m || !(c.args || []).includes(`--config=${m.mountPath}/model.conf`))
            workerTokIssues.push(`${role}: args do not read --config=${m?.mountPath}/model.conf`);
        if ((c.args || []).some((a) => /^--tokenizer(=|$)/.test(String(a))))
            workerTokIssues.push(`${role}: a --tokenizer flag besides model.conf's`);
    }
    check(`${name}: the workers read the router's vocabulary (model.conf) for structured outputs`,
        workerTokIssues.length === 0, workerTokIssues.join("\n"));

    // RBAC: what the router's scaler patches (router.conf scaler-k8s-*) must
    // be granted to the router's ServiceAccount through a RoleBinding.
    const rbacIssues = [];
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
const opts = { image: null, imageVocab: "/opt/tandem/vocab", vocabRoot: null, dockerfile: null };
const renders = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--metrics") metricsPath = args[++i];
    else if (args[i] === "--dashboard") dashboard = args[++i];
    else if (args[i] === "--image") opts.image = args[++i];
    else if (args[i] === "--vocab-root") opts.vocabRoot = args[++i];
    else if (args[i] === "--dockerfile") opts.dockerfile = args[++i];
    else if (args[i] === "--manifests") {
        const [n, f] = args[++i].split("=");
        renders.push([n, f]);
    } else {
        console.error(`validate_manifests: unknown argument ${args[i]}`);
        process.exit(2);
    }
}
if (!metricsPath) {
    console.error("usage: validate_manifests.mjs --metrics METRICS.md [--manifests NAME=FILE ...] [--dashboard FILE]\n" +
        "       [--image NAME:TAG] [--vocab-root DIR] [--dockerfile FILE]");
    process.exit(2);
}
const metrics = loadMetrics(metricsPath);
check(`METRICS.md documents the metrics (${metrics.size} names, tandem_pool_desired_replicas among them)`,
    metrics.size >= 20 && metrics.has("tandem_pool_desired_replicas"));
for (const [n, f] of renders) await validateRender(n, f, metrics, opts);
if (dashboard) validateDashboard(dashboard, metrics);
process.exit(failures ? 1 : 0);
