#!/usr/bin/env python3
"""The layering check: every `#include "..."` in the project's C/CUDA sources
must follow the folder-to-folder table in docs/ARCHITECTURE.md ("Layers"),
and that table must have no loops, so lower layers never include higher ones.

  check_layers.py [ROOT]     TAP output, exit 1 on any violation

A source's layer is its top folder (kernels/cuda/x.cu is in `kernels`); an
include's layer is the top folder of the quoted path. Includes within one
layer are always allowed. Tracked files in folders the table does not name
fail, so a new folder must be placed in the table (and so in the docs)
first.
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_ENDINGS = ('.c', '.h', '.cu', '.cuh')


def read_table(doc):
    """Rows `| `layer` | `a`, `b` |` of the section "## Layers"."""
    text = open(doc, encoding='utf-8').read()
    m = re.search(r'^## Layers\n(.*?)(?=^## )', text, re.M | re.S)
    if not m:
        raise SystemExit(f'{doc}: no "## Layers" section')
    table = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) < 2 or not cells[0].startswith('`'):
            continue
        layer = cells[0].strip('`')
        table[layer] = set(re.findall(r'`([^`]+)`', cells[1]))
    if not table:
        raise SystemExit(f'{doc}: the Layers table has no rows')
    return table


def find_loop(table):
    """A cycle among the table's edges as a list of layers, or None."""
    state = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(table.get(node, ())):
            if nxt == '*':
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state:
                loop = visit(nxt, path + [nxt])
                if loop:
                    return loop
        state[node] = 2
        return None

    for node in sorted(table):
        if node not in state:
            loop = visit(node, [node])
            if loop:
                return loop
    return None


def sources(root, table):
    """In a git checkout: the tracked files, and the untracked ones (not yet
    added) inside folders the table names, so a build folder of one's own
    (build-*/gen/*.c) is not taken for a new layer; elsewhere every file."""
    def git(*args):
        return subprocess.run(['git', '-C', root, 'ls-files', *args], capture_output=True,
                              text=True, check=True).stdout.split('\n')
    try:
        out = git('--cached') + [f for f in git('--others', '--exclude-standard')
                                 if f.split('/', 1)[0] in table]
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f), root)
               for d, _, fs in os.walk(root) for f in fs]
    return sorted(f for f in set(out) if f.endswith(SOURCE_ENDINGS) and '/' in f
                  and os.path.exists(os.path.join(root, f)))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    table = read_table(os.path.join(root, 'docs', 'ARCHITECTURE.md'))
    n = 0
    bad_total = 0
    n += 1
    loop = find_loop(table)
    if loop:
        print(f'not ok {n} - the layer table has a loop: {" -> ".join(loop)}')
        bad_total += 1
    else:
        print(f'ok {n} - the layer table ({len(table)} layers) has no loop')
    by_layer = {}
    for f in sources(root, table):
        by_layer.setdefault(f.split('/', 1)[0], []).append(f)
    for layer in sorted(by_layer):
        n += 1
        allowed = table.get(layer)
        if allowed is None:
            print(f'not ok {n} - {layer}/ is not in the Layers table of docs/ARCHITECTURE.md')
            bad_total += 1
            continue
        bad = []
        for f in by_layer[layer]:
            text = open(os.path.join(root, f), encoding='utf-8', errors='replace').read()
            for inc in INCLUDE.findall(text):
                if '/' not in inc:
                    continue  # a file beside it (tests' helpers)
                target = inc.split('/', 1)[0]
                if target == layer or '*' in allowed or target in allowed:
                    continue
                bad.append(f'{f}: #include "{inc}" ({layer} may include {", ".join(sorted(allowed)) or "nothing"})')
        if bad:
            print(f'not ok {n} - {layer}/ includes outside its layers')
            for b in bad:
                print(f'# {b}')
            bad_total += 1
        else:
            print(f'ok {n} - {layer}/ ({len(by_layer[layer])} files) includes only {", ".join(sorted(allowed)) or "itself"}')
    print(f'1..{n}')
    return 1 if bad_total else 0


if __name__ == '__main__':
    sys.exit(main())
