#!/usr/bin/env python3
"""Embeds a file in the build as a C byte array (NUL-terminated):

    python3 router/embed_file.py FILE SYMBOL > out.c

gives `const unsigned char SYMBOL[]` and `const unsigned long SYMBOL_len` (bytes, without
the NUL). The dashboard page (router/dashboard.html) stays an ordinary file
that can be edited and opened on its own; the router serves these bytes."""
import sys

def main():
    path, sym = sys.argv[1], sys.argv[2]
    data = open(path, "rb").read()
    out = sys.stdout
    out.write("/* Generated from %s by router/embed_file.py. Do not edit. */\n" % path)
    out.write("const unsigned long %s_len = %d;\n" % (sym, len(data)))
    out.write("const unsigned char %s[] = {\n" % sym)
    for i in range(0, len(data), 16):
        out.write("    " + ", ".join(str(b) for b in data[i:i + 16]) + ",\n")
    out.write("    0};\n")

if __name__ == "__main__":
    main()
