#!/usr/bin/env python3
"""Generates the Unicode property tables the tokenizers need, as C source.

Usage: unicode_gen.py UNICODE_DIR > unicode_tables.c

UNICODE_DIR is a copy of the Unicode Character Database (Debian package
`unicode-data` installs it in /usr/share/unicode). The tables are derived
from the database and never typed by hand:

  UnicodeData.txt                general categories (\\p{L}, \\p{N}, \\p{M} ...),
                                 canonical combining classes, canonical
                                 decompositions
  PropList.txt                   White_Space (the regex class \\s)
  DerivedNormalizationProps.txt  Full_Composition_Exclusion and NFC_QC

The build runs this into build/gen/tokenizer/unicode_tables.c; the declarations
live in tokenizer/unicode_data.h.
"""
import os
import re
import sys

# Must match the order of enum uc_gc in tokenizer/unicode_data.h.
GC_NAMES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
            "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk",
            "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]

# Hangul syllables are composed and decomposed algorithmically (Unicode
# 3.12), so they are left out of the decomposition tables.
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def parse_range(field):
    field = field.strip()
    if ".." in field:
        a, b = field.split("..")
        return int(a, 16), int(b, 16)
    return int(field, 16), int(field, 16)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield line


def load_unicode_data(path):
    gc, ccc, decomp = {}, {}, {}
    range_start = None
    for line in read_lines(path):
        fields = line.split(";")
        cp = int(fields[0], 16)
        name, cat, comb, dec = fields[1], fields[2], int(fields[3]), fields[5]
        if name.endswith(", First>"):
            range_start = cp
            continue
        if name.endswith(", Last>"):
            for c in range(range_start, cp + 1):
                gc[c] = cat
                if comb:
                    ccc[c] = comb
            range_start = None
            continue
        gc[cp] = cat
        if comb:
            ccc[cp] = comb
        if dec and not dec.startswith("<"):
            decomp[cp] = [int(x, 16) for x in dec.split()]
    return gc, ccc, decomp


def load_property(path, prop):
    out = set()
    for line in read_lines(path):
        fields = [f.strip() for f in line.split(";")]
        if fields[1] == prop:
            a, b = parse_range(fields[0])
            out.update(range(a, b + 1))
    return out


def load_nfc_qc(path):
    qc = {}
    for line in read_lines(path):
        fields = [f.strip() for f in line.split(";")]
        if len(fields) >= 3 and fields[1] == "NFC_QC":
            a, b = parse_range(fields[0])
            for c in range(a, b + 1):
                qc[c] = fields[2]
    return qc


def ranges_of(mapping):
    """Merges consecutive code points with equal values into (first, last, value)."""
    out = []
    for cp in sorted(mapping):
        v = mapping[cp]
        if out and out[-1][1] == cp - 1 and out[-1][2] == v:
            out[-1][1] = cp
        else:
            out.append([cp, cp, v])
    return out


def full_decomposition(cp, decomp):
    if cp not in decomp:
        return [cp]
    out = []
    for c in decomp[cp]:
        out.extend(full_decomposition(c, decomp))
    return out


def version_of(path):
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    m = re.search(r"-(\d+\.\d+\.\d+)\.txt", first)
    if not m:
        sys.exit(f"unicode_gen.py: cannot read the Unicode version from {path}")
    return m.group(1)


def emit_ranges(out, ctype, name, rows, fmt):
    out.append(f"const {ctype} {name}[] = {{")
    line = "   "
    for row in rows:
        item = " " + fmt(row) + ","
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")
    out.append(f"const size_t {name}_count = sizeof({name}) / sizeof({name}[0]);")
    out.append("")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: unicode_gen.py UNICODE_DIR > unicode_tables.c")
    udir = sys.argv[1]
    need = ["UnicodeData.txt", "PropList.txt", "DerivedNormalizationProps.txt"]
    for n in need:
        if not os.path.exists(os.path.join(udir, n)):
            sys.exit(f"unicode_gen.py: {os.path.join(udir, n)} is missing "
                     "(install the Debian package unicode-data: make deps)")
    gc, ccc, decomp = load_unicode_data(os.path.join(udir, "UnicodeData.txt"))
    white = load_property(os.path.join(udir, "PropList.txt"), "White_Space")
    norm_path = os.path.join(udir, "DerivedNormalizationProps.txt")
    exclusions = load_property(norm_path, "Full_Composition_Exclusion")
    qc = load_nfc_qc(norm_path)
    version = version_of(norm_path)

    gc_ranges = ranges_of({cp: GC_NAMES.index(c) for cp, c in gc.items()})
    ws_ranges = ranges_of({cp: 1 for cp in white})
    ccc_ranges = ranges_of(ccc)
    qc_ranges = ranges_of({cp: (1 if v == "N" else 2) for cp, v in qc.items()})

    dec_entries, dec_data = [], []
    for cp in sorted(decomp):
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        full = full_decomposition(cp, decomp)
        if len(full) > 8:  # UC_MAX_DECOMP in tokenizer/unicode.h
            sys.exit(f"unicode_gen.py: U+{cp:04X} decomposes to {len(full)} code points")
        dec_entries.append((cp, len(dec_data), len(full)))
        dec_data.extend(full)

    # Primary composites: canonical pair decompositions that are not
    # excluded from composition (singletons and non-starter decompositions
    # are Full_Composition_Exclusion already).
    comp = sorted((d[0], d[1], cp) for cp, d in decomp.items()
                  if len(d) == 2 and cp not in exclusions)

    out = [f"/* Generated by tokenizer/unicode_gen.py from the Unicode {version} "
           "Character Database. Do not edit. */",
           '#include "tokenizer/unicode_data.h"', "",
           f'const char uc_unicode_version[] = "{version}";', ""]
    emit_ranges(out, "uc_range", "uc_gc_ranges", gc_ranges,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, UC_{GC_NAMES[r[2]].upper()}}}")
    emit_ranges(out, "uc_range", "uc_white_space_ranges", ws_ranges,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, 1}}")
    emit_ranges(out, "uc_range", "uc_ccc_ranges", ccc_ranges,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, {r[2]}}}")
    emit_ranges(out, "uc_range", "uc_nfc_qc_ranges", qc_ranges,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, {r[2]}}}")
    emit_ranges(out, "uc_decomp_entry", "uc_decomp_entries", dec_entries,
                lambda r: f"{{0x{r[0]:X}, {r[1]}, {r[2]}}}")
    emit_ranges(out, "uint32_t", "uc_decomp_data", dec_data, lambda r: f"0x{r:X}")
    emit_ranges(out, "uc_comp_entry", "uc_comp_entries", comp,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, 0x{r[2]:X}}}")
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
