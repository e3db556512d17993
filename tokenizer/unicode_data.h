/* Unicode Character Database tables, generated at build time by
 * tokenizer/unicode_gen.py from the Debian `unicode-data` files into
 * build/gen/router/unicode_tables.c. Lookups go through tokenizer/unicode.h;
 * this header only declares the raw tables. */
#ifndef TANDEM_TOKENIZER_UNICODE_DATA_H
#define TANDEM_TOKENIZER_UNICODE_DATA_H
#include <stddef.h>
#include <stdint.h>

/* General categories. UC_CN (unassigned) is 0 so a code point missing from
 * the range table reads as unassigned. The generator emits the same order. */
typedef enum uc_gc {
    UC_CN = 0,
    UC_LU, UC_LL, UC_LT, UC_LM, UC_LO,
    UC_MN, UC_MC, UC_ME,
    UC_ND, UC_NL, UC_NO,
    UC_PC, UC_PD, UC_PS, UC_PE, UC_PI, UC_PF, UC_PO,
    UC_SM, UC_SC, UC_SK, UC_SO,
    UC_ZS, UC_ZL, UC_ZP,
    UC_CC, UC_CF, UC_CS, UC_CO,
} uc_gc;

/* A run of code points [first, last] sharing one value. Sorted by first,
 * never overlapping. */
typedef struct uc_range {
    uint32_t first, last;
    uint8_t value;
} uc_range;

/* Full canonical decomposition of cp: uc_decomp_data[offset .. offset+len). */
typedef struct uc_decomp_entry {
    uint32_t cp;
    uint32_t offset;
    uint8_t len;
} uc_decomp_entry;

/* Primary composite: first + second compose to composite. Sorted by
 * (first, second). */
typedef struct uc_comp_entry {
    uint32_t first, second, composite;
} uc_comp_entry;

extern const char uc_unicode_version[];
extern const uc_range uc_gc_ranges[];           /* value: uc_gc */
extern const size_t uc_gc_ranges_count;
extern const uc_range uc_white_space_ranges[];  /* value: 1 */
extern const size_t uc_white_space_ranges_count;
extern const uc_range uc_ccc_ranges[];          /* value: canonical combining class */
extern const size_t uc_ccc_ranges_count;
extern const uc_range uc_nfc_qc_ranges[];       /* value: 1 = NFC_QC No, 2 = Maybe */
extern const size_t uc_nfc_qc_ranges_count;
extern const uc_decomp_entry uc_decomp_entries[]; /* sorted by cp, Hangul excluded */
extern const size_t uc_decomp_entries_count;
extern const uint32_t uc_decomp_data[];
extern const size_t uc_decomp_data_count;
extern const uc_comp_entry uc_comp_entries[];
extern const size_t uc_comp_entries_count;

#endif
