/* The op case table (tests/ops/) as a cmocka test: one test per case and
 * backend, named op/case/backend, on the CPU and, in a CUDA=1 build with a
 * device, on CUDA. Arguments as test_cuda_ops: [seed [moe|moe-fp8|FILTER]]
 * (the seed defaults to 1, so `make test` is deterministic). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include "tests/ops/op_harness.h"

static void run_case(void **state)
{
    const op_run *r = *state;
    const char *why;
    if (ops_run_one(r, &why) != 0)
        fail_msg("%s: %s", r->name, why);
}

int main(int argc, char **argv)
{
    ops_init(argc, argv, 1);
    const op_run *runs;
    size_t n = ops_runs(&runs);
    struct CMUnitTest *tests = calloc(n ? n : 1, sizeof *tests);
    for (size_t i = 0; i < n; i++)
        tests[i] = (struct CMUnitTest){ runs[i].name, run_case, NULL, NULL, (void *)&runs[i] };
    int rc = _cmocka_run_group_tests("ops", tests, n, NULL, NULL);
    free(tests);
    ops_finish();
    return rc;
}
