#!/usr/bin/env bash
# s6run4: the serving sweep again with the KV transfer fixes (4096/200 and
# 32768/100, the vLLM-comparison workloads) plus the disaggregation runs,
# then the seed table again (120B 128000 in chunks, 120B batch 128 with the
# window pool, multi-rank runs exiting cleanly).
set -u
OUT0=$OUT
OUT=$OUT0/s TANDEM_PREBUILT=gpu-carry/prebuilt-cluster.tar.xz BUDGET_S=300 SEND_S=15 POINT_S=21 \
  timeout 340 bash tests/gpu/serve_bench.sh 4096/200 32768/100 > $OUT0/serve.txt 2>&1
echo "serve rc $?"
cp $OUT0/s/*.json $OUT0/s/*.svg $OUT0/s/*.txt $OUT0/ 2>/dev/null
(cd $OUT0 && tar czf logs_s.tgz --exclude=unpacked s 2>/dev/null; rm -rf s $OUT0/*.svg)
B=$OUT0/u/prebuilt; mkdir -p $OUT0/u && tar xJf gpu-carry/prebuilt.tar.xz -C $OUT0/u
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
TANDEM_CUDA_MOE_FP8_GEMM=7 timeout 60 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --synthetic tests/fixtures/configs/gpt-oss-120b.json --weights fp8 --prefill 8192 --batch none --repeat 3 --profile > $OUT0/b_oss120b_moe7.log 2>&1
timeout 45 $B/bin/tandem-bench --device cuda --peak-tflops 789.8 --synthetic tests/fixtures/configs/gpt-oss-120b.json --weights fp8 --prefill 8192 --batch none --repeat 3 > $OUT0/b_oss120b_moe0.log 2>&1
TANDEM_CUDA_MOE_FP8_GEMM=7 timeout 90 $B/bin/test_engine_gpu 0 > $OUT0/engine_moe7.log 2>&1; echo "engine moe7 rc $?"
OUT=$OUT0/c BUDGET_S=150 TANDEM_PREBUILT=gpu-carry/prebuilt.tar.xz bash tests/gpu/run.sh seed-table > $OUT0/run.txt 2>&1
echo "seed rc $?"
cp $OUT0/c/seed_table.txt $OUT0/ 2>/dev/null
(cd $OUT0 && tar czf logs_c.tgz --exclude=unpacked c 2>/dev/null; rm -rf c)
grep -A40 "== serve summary" $OUT0/serve.txt | head -40; grep -A30 "where a request" $OUT0/serve.txt | tail -14; grep "disaggregation" $OUT0/serve.txt
grep -E "^prefill|MoE experts" $OUT0/b_oss120b_*.log; tail -2 $OUT0/engine_moe7.log; rm -rf $OUT0/u
sed -n '/== seed table/,$p' $OUT0/seed_table.txt | grep -E "^\|" | head -30
