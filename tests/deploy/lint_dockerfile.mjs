// Lints Dockerfiles with the validator of the npm package dockerfile-utils
// (the one VS Code's Docker support uses: parse errors, unknown instructions
// and flags, bad arguments, ports, durations, signals, stage names...), every
// configurable rule turned up to an error, plus three rules of our own that
// it does not have: base images pinned to a tag (not `latest`, not bare), a
// final stage that runs as a non-root USER, and an ENTRYPOINT there. Prints
// every diagnostic as FILE:LINE:COL: SEVERITY: MESSAGE and exits 1 when
// there is any (warnings included), 0 when there is none.
//
//   node lint_dockerfile.mjs Dockerfile [MORE...]
import fs from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { validate, ValidationSeverity } = require("dockerfile-utils");

const ERROR = ValidationSeverity.ERROR;
// every setting ValidatorSettings has (dockerfile-utils 0.16), as errors
const SETTINGS = {
    deprecatedMaintainer: ERROR,
    directiveCasing: ERROR,
    emptyContinuationLine: ERROR,
    instructionCasing: ERROR,
    instructionCmdMultiple: ERROR,
    instructionEntrypointMultiple: ERROR,
    instructionHealthcheckMultiple: ERROR,
    instructionJSONInSingleQuotes: ERROR,
    instructionWorkdirRelative: ERROR,
};

// Instructions as (line, keyword, argument text) with continuation lines
// joined; comments and parser directives dropped.
function instructions(text) {
    const out = [];
    const lines = text.split("\n");
    for (let i = 0; i < lines.length; i++) {
        if (/^\s*(#|$)/.test(lines[i])) continue;
        const start = i;
        let joined = lines[i];
        while (/\\\s*$/.test(joined) && i + 1 < lines.length) {
            joined = joined.replace(/\\\s*$/, " ");
            i++;
            if (!/^\s*#/.test(lines[i])) joined += lines[i];
        }
        const m = joined.trim().match(/^(\S+)\s*(.*)$/);
        if (m) out.push({ line: start, keyword: m[1].toUpperCase(), args: m[2] });
    }
    return out;
}

function ownRules(text) {
    const found = [];
    const ins = instructions(text);
    const args = {};
    for (const x of ins.filter((x) => x.keyword === "ARG" && ins.indexOf(x) < ins.findIndex((y) => y.keyword === "FROM"))) {
        const m = x.args.match(/^([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?/);
        if (m) args[m[1]] = m[2] ?? "";
    }
    const stages = new Set();
    let last = null;
    for (const x of ins) {
        if (x.keyword !== "FROM") continue;
        const words = x.args.split(/\s+/).filter((w) => !w.startsWith("--"));
        const image = (words[0] || "").replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (s, v) => args[v] ?? s);
        if (words[1]?.toLowerCase() === "as" && words[2]) stages.add(words[2]);
        if (!stages.has(words[0]) && image !== "scratch") {
            const ref = image.split("@")[0];
            const tag = ref.includes(":") && ref.lastIndexOf(":") > ref.lastIndexOf("/") ? ref.slice(ref.lastIndexOf(":") + 1) : "";
            if (!image.includes("@") && (!tag || tag === "latest"))
                found.push({ line: x.line, message: `base image '${image}' is not pinned to a tag (or digest) other than latest` });
        }
        last = x;
    }
    if (last) {
        const final = ins.slice(ins.indexOf(last) + 1);
        const user = final.filter((x) => x.keyword === "USER").pop();
        const who = user ? user.args.split(":")[0].trim() : "";
        if (!user || who === "root" || who === "0")
            found.push({ line: user ? user.line : last.line, message: "the final stage does not switch to a non-root USER" });
        if (!final.some((x) => x.keyword === "ENTRYPOINT"))
            found.push({ line: last.line, message: "the final stage has no ENTRYPOINT" });
    }
    return found;
}

const files = process.argv.slice(2);
if (files.length === 0) {
    console.error("usage: lint_dockerfile.mjs DOCKERFILE...");
    process.exit(2);
}
let count = 0;
for (const file of files) {
    let text;
    try {
        text = fs.readFileSync(file, "utf8");
    } catch (e) {
        console.error(`${file}: ${e.message}`);
        process.exit(2);
    }
    const diags = validate(text, SETTINGS).map((d) => ({
        line: d.range.start.line, col: d.range.start.character,
        severity: d.severity === 1 ? "error" : "warning", message: d.message,
    }));
    for (const d of ownRules(text)) diags.push({ line: d.line, col: 0, severity: "error", message: d.message });
    diags.sort((a, b) => a.line - b.line || a.col - b.col);
    for (const d of diags) console.log(`${file}:${d.line + 1}:${d.col + 1}: ${d.severity}: ${d.message}`);
    count += diags.length;
    if (diags.length === 0) console.log(`${file}: no diagnostics`);
}
process.exit(count ? 1 : 0);
