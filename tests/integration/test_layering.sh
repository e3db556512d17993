#!/usr/bin/env bash
# The layering check (tests/layers/check_layers.py) over the whole tree: every
# #include "..." follows docs/ARCHITECTURE.md's Layers table, which has no
# loops. Then the checker itself is checked on a scratch tree: an include
# against the table, a folder missing from it and a loop in it must each fail.
set -u
cd "$(dirname "$0")/../.."
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1)); }

# the real tree: the checker's own TAP lines are this test's cases
python3 tests/layers/check_layers.py . || fails=$((fails + 1))

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mk_tree() {
    rm -rf "$scratch/t" && mkdir -p "$scratch/t/docs" "$scratch/t/common" "$scratch/t/router"
    cat >"$scratch/t/docs/ARCHITECTURE.md" <<'DOC'
## Layers

| layer | may include |
| --- | --- |
| `common` | |
| `router` | `common` |

## Next
DOC
    echo '#include "common/a.h"' >"$scratch/t/router/r.c"
    echo 'int a;' >"$scratch/t/common/a.h"
}
check_scratch() { python3 tests/layers/check_layers.py "$scratch/t" >"$scratch/out" 2>&1; }

mk_tree
if check_scratch; then ok "a tree that follows its table passes"; else bad "a tree that follows its table passes"; sed 's/^/# /' "$scratch/out"; fi

mk_tree
echo '#include "router/r.h"' >"$scratch/t/common/up.c"
if check_scratch; then bad "common including router is refused"
elif grep -q 'common/up.c: #include "router/r.h"' "$scratch/out"; then ok "common including router is refused, naming the file and the include"
else bad "common including router is refused, naming the file and the include"; sed 's/^/# /' "$scratch/out"; fi

mk_tree
mkdir -p "$scratch/t/extra" && echo 'int x;' >"$scratch/t/extra/x.c"
if ! check_scratch && grep -q 'extra/ is not in the Layers table' "$scratch/out"; then
    ok "a folder missing from the table is refused"
else bad "a folder missing from the table is refused"; sed 's/^/# /' "$scratch/out"; fi

mk_tree
sed -i 's/^| `common` | |$/| `common` | `router` |/' "$scratch/t/docs/ARCHITECTURE.md"
if ! check_scratch && grep -q 'has a loop: common -> router -> common\|has a loop: router -> common -> router' "$scratch/out"; then
    ok "a loop in the table is refused"
else bad "a loop in the table is refused"; sed 's/^/# /' "$scratch/out"; fi

[ "$fails" -eq 0 ]
