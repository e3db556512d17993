#include "tests/unit/comm_testutil.h"
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "common/status.h"

float ct_datum(int r, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return ((float)(h % 20001u) - 10000.0f) / 997.0f * (1.0f + (float)(h % 7u));
}

int ct_expect_peer_error(const rt_rank *r, comm *c, int rc, const char *expect)
{
    if (rc != TN_ERR_PEER) {
        fprintf(stderr, "rank %d: collective returned %d, expected TN_ERR_PEER\n", r->rank, rc);
        return E_EXPECTED_FAIL;
    }
    if (!strstr(comm_error(c), expect)) {
        fprintf(stderr, "rank %d: error '%s' does not mention '%s'\n", r->rank, comm_error(c),
                expect);
        return E_MESSAGE;
    }
    fprintf(stderr, "rank %d: got the expected error: %s\n", r->rank, comm_error(c));
    return PASS;
}

void ct_run_group(int world, const char *tag, rt_rank_fn fn, void *arg, const int *want_status)
{
    rt_group g;
    int status[RT_MAX_RANKS];
    assert_int_equal(rt_start(&g, world, tag, fn, arg), 0);
    rt_wait(&g, CT_WAIT_MS, status);
    for (int r = 0; r < world; r++) {
        int want = want_status ? want_status[r] : PASS;
        if (status[r] != want)
            print_error("rank %d: status %d, expected %d\n", r, status[r], want);
        assert_int_equal(status[r], want);
    }
    assert_false(rt_shm_exists(g.name));
    assert_int_equal(rt_shm_count_ours(tag), 0);
}
