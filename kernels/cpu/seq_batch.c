#include "kernels/cpu/seq_batch.h"
#include "kernels/kn_check.h"
#include "common/status.h"

int kn_cpu_check_seq_batch(const char *op, const kn_seq_batch *b, int page_size, int lookback)
{
    /* The op entry point checked b and its sizes; the arrays are read here,
     * even for no sequences (q_offset[0]). */
    if (!b->q_offset || !b->kv_len || !b->page_table)
        return kn_arg_error(op, "batch has a NULL %s",
                            !b->q_offset ? "q_offset" : !b->kv_len ? "kv_len" : "page_table");
    if (b->q_offset[0] != 0 || b->q_offset[b->n_seqs] != b->n_rows)
        return kn_arg_error(op, "q_offset must run from 0 to n_rows=%d (got %d..%d)",
                            b->n_rows, (int)b->q_offset[0], (int)b->q_offset[b->n_seqs]);
    long long capacity = (long long)b->max_pages * page_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int n_q = b->q_offset[s + 1] - b->q_offset[s];
        int kv_len = b->kv_len[s];
        if (n_q < 0)
            return kn_arg_error(op, "q_offset decreases at sequence %d", s);
        if (n_q > b->max_q_len)
            return kn_arg_error(op, "sequence %d has %d rows, above max_q_len %d", s, n_q,
                                b->max_q_len);
        if (kv_len < n_q || kv_len > b->max_kv_len || kv_len > capacity)
            return kn_arg_error(op, "sequence %d: kv_len %d must be within [%d rows, "
                                "max_kv_len %d] and max_pages*page_size %lld", s, kv_len, n_q,
                                b->max_kv_len, capacity);
        const int32_t *pages = b->page_table + (size_t)s * b->max_pages;
        int used = (kv_len + page_size - 1) / page_size;
        long long first_read = (long long)kv_len - n_q - lookback;
        int first = first_read > 0 ? (int)(first_read / page_size) : 0;
        for (int i = 0; i < first; i++)
            if (pages[i] != -1 && (pages[i] < 0 || pages[i] >= b->n_pages))
                return kn_arg_error(op, "sequence %d: page_table[%d] = %d neither -1 nor in [0, %d)",
                                    s, i, (int)pages[i], b->n_pages);
        for (int i = first; i < used; i++)
            if (pages[i] < 0 || pages[i] >= b->n_pages)
                return kn_arg_error(op, "sequence %d: page_table[%d] = %d outside [0, %d)", s,
                                    i, (int)pages[i], b->n_pages);
    }
    return TN_OK;
}

int kn_cpu_seq_of_row(const kn_seq_batch *b, int r)
{
    /* Last s with q_offset[s] <= r; empty sequences before it are skipped
     * because their q_offset equals the next one's. */
    int lo = 0, hi = b->n_seqs - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (b->q_offset[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
