#!/usr/bin/env bash
# s5run1: wgmma mode 2 as the default: checks + engine bench
set -u
export TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz TANDEM_PREBUILT_CLUSTER=gpu-carry/prebuilt-cluster.tar.xz
export BUDGET_S=560
bash tests/gpu/run.sh ops engine generate ranks cluster cluster-ranks bench-engine > $OUT/main.txt 2>&1
rc=$?
(cd $OUT && tar czf logs.tgz --exclude=unpacked --exclude=logs.tgz --exclude=main.txt . 2>/dev/null)
rm -rf $OUT/unpacked
find $OUT -maxdepth 1 -type f ! -name main.txt ! -name logs.tgz -delete
find $OUT -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
tail -40 $OUT/main.txt
exit $rc
