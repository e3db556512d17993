#!/usr/bin/env bash
# s6run5: the seed table again (128000-token prompts in chunks, the 120B's
# batch 128 with the window pool, multi-rank runs exiting cleanly).
set -u
OUT0=$OUT
OUT=$OUT0/seed BUDGET_S=115 TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz timeout 140 bash tests/gpu/seed_table.sh > $OUT0/seed_table.txt 2>&1
echo "seed rc $?"
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked seed 2>/dev/null; rm -rf seed)
grep -E "exit [0-9]|^\||seed_table:" $OUT0/seed_table.txt | head -40
