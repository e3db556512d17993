/* Checks shared by the CPU attention ops (internal to kernels/cpu/). */
#ifndef TANDEM_KERNELS_CPU_SEQ_BATCH_H
#define TANDEM_KERNELS_CPU_SEQ_BATCH_H
#include "kernels/attention.h"

/* Validates the arrays of a batch whose host fields kn_attention /
 * kn_kv_append have checked (dispatch.c) and whose arrays are host memory:
 * none is NULL; q_offset starts at 0, never
 * decreases and ends at n_rows; each sequence has no more rows than tokens,
 * fits max_q_len, max_kv_len and its max_pages pages; and every page it
 * reads or writes is an id in [0, n_pages). The op reads `lookback`
 * positions before a sequence's first row (kv_append 0, a window layer
 * window - 1, full attention INT_MAX): pages wholly before those may be -1
 * (kernels/attention.h). Returns TN_OK or TN_ERR_ARG with a message. */
int kn_cpu_check_seq_batch(const char *op, const kn_seq_batch *b, int page_size, int lookback);

/* The sequence that row r (< n_rows) belongs to. */
int kn_cpu_seq_of_row(const kn_seq_batch *b, int r);

/* Position of row r of sequence s within that sequence. */
static inline int kn_cpu_row_position(const kn_seq_batch *b, int s, int r)
{
    int n_q = b->q_offset[s + 1] - b->q_offset[s];
    return b->kv_len[s] - n_q + (r - b->q_offset[s]);
}
#endif
