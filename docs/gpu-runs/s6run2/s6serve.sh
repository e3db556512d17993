#!/usr/bin/env bash
# s6run2: issue 20's serving sweep in one call: all four workloads at
# concurrency 1,4,16,64,256 (shorter points than the two-call default:
# requests started for 15 s, aborted at 21 s) and the disaggregation runs.
set -u
OUT0=$OUT
OUT=$OUT0/s TANDEM_PREBUILT=gpu-carry/prebuilt-cluster.tar.xz BUDGET_S=500 SEND_S=15 POINT_S=21 \
  timeout 560 bash tests/gpu/serve_bench.sh 4096/200 32768/100 1024/1024 8192/256 > $OUT0/serve.txt 2>&1
echo "serve rc $?"
cp $OUT0/s/*.json $OUT0/s/*.svg $OUT0/s/*.txt $OUT0/ 2>/dev/null
(cd $OUT0 && tar czf logs.tgz --exclude=unpacked s 2>/dev/null; rm -rf s)
tail -60 $OUT0/serve.txt
