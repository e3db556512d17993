#include "tokenizer/unicode.h"

/* Binary search over a sorted range table; 0 when cp is in no range. */
static int range_lookup(const uc_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return r[mid].value;
    }
    return 0;
}

uc_gc uc_category(uint32_t cp)
{
    return (uc_gc)range_lookup(uc_gc_ranges, uc_gc_ranges_count, cp);
}

int uc_is_white_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return range_lookup(uc_white_space_ranges, uc_white_space_ranges_count, cp);
}

int uc_combining_class(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    return range_lookup(uc_ccc_ranges, uc_ccc_ranges_count, cp);
}

int uc_nfc_quick_check(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    return range_lookup(uc_nfc_qc_ranges, uc_nfc_qc_ranges_count, cp);
}

/* Hangul syllable arithmetic (Unicode 3.12). */
enum {
    HANGUL_S_BASE = 0xAC00, HANGUL_L_BASE = 0x1100, HANGUL_V_BASE = 0x1161,
    HANGUL_T_BASE = 0x11A7, HANGUL_L_COUNT = 19, HANGUL_V_COUNT = 21,
    HANGUL_T_COUNT = 28, HANGUL_N_COUNT = HANGUL_V_COUNT * HANGUL_T_COUNT,
    HANGUL_S_COUNT = HANGUL_L_COUNT * HANGUL_N_COUNT,
};

int uc_decompose(uint32_t cp, uint32_t out[UC_MAX_DECOMP])
{
    if (cp >= HANGUL_S_BASE && cp < HANGUL_S_BASE + HANGUL_S_COUNT) {
        uint32_t s = cp - HANGUL_S_BASE;
        out[0] = HANGUL_L_BASE + s / HANGUL_N_COUNT;
        out[1] = HANGUL_V_BASE + (s % HANGUL_N_COUNT) / HANGUL_T_COUNT;
        if (s % HANGUL_T_COUNT == 0)
            return 2;
        out[2] = HANGUL_T_BASE + s % HANGUL_T_COUNT;
        return 3;
    }
    if (cp >= 0xC0) {
        size_t lo = 0, hi = uc_decomp_entries_count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            const uc_decomp_entry *e = &uc_decomp_entries[mid];
            if (cp < e->cp) {
                hi = mid;
            } else if (cp > e->cp) {
                lo = mid + 1;
            } else {
                int len = e->len > UC_MAX_DECOMP ? UC_MAX_DECOMP : e->len;
                for (int i = 0; i < len; i++)
                    out[i] = uc_decomp_data[e->offset + (uint32_t)i];
                return len;
            }
        }
    }
    out[0] = cp;
    return 1;
}

uint32_t uc_compose(uint32_t first, uint32_t second)
{
    if (first >= HANGUL_L_BASE && first < HANGUL_L_BASE + HANGUL_L_COUNT &&
        second >= HANGUL_V_BASE && second < HANGUL_V_BASE + HANGUL_V_COUNT)
        return HANGUL_S_BASE +
               ((first - HANGUL_L_BASE) * HANGUL_V_COUNT + (second - HANGUL_V_BASE)) *
                   HANGUL_T_COUNT;
    if (first >= HANGUL_S_BASE && first < HANGUL_S_BASE + HANGUL_S_COUNT &&
        (first - HANGUL_S_BASE) % HANGUL_T_COUNT == 0 && second > HANGUL_T_BASE &&
        second < HANGUL_T_BASE + HANGUL_T_COUNT)
        return first + (second - HANGUL_T_BASE);
    size_t lo = 0, hi = uc_comp_entries_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uc_comp_entry *e = &uc_comp_entries[mid];
        if (first < e->first || (first == e->first && second < e->second))
            hi = mid;
        else if (first > e->first || second > e->second)
            lo = mid + 1;
        else
            return e->composite;
    }
    return 0;
}
