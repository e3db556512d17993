/* The op case table (tests/ops/) on the GPU machine, built with
 * `make CUDA=1 gpu-progs` and run by tests/gpu/run.sh: every case on the
 * CPU and on CUDA (each against float64, CUDA also against the CPU), as
 * plain TAP (no cmocka on the device machine), one line per case and
 * backend named op/case/backend, then the plan.
 *
 * Usage: test_cuda_ops [seed [moe|moe-fp8|FILTER]]   (seed defaults to the
 * time; `moe` runs only the bf16 expert paths' cases, `moe-fp8` every FP8
 * expert-path batch; FILTER: a substring of the case names) */
#include "tests/ops/op_harness.h"

int main(int argc, char **argv)
{
    return ops_main_tap(argc, argv);
}
