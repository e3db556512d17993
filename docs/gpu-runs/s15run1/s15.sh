#!/usr/bin/env bash
# s15 (one call, ~8 min): s15a.sh then s15b.sh, each into its own folder
# of $OUT (one machine start for both; each prints its own table).
set -u
mkdir -p $OUT/a $OUT/b
OUT=$OUT/a bash gpu-carry/s15a.sh
OUT=$OUT/b bash gpu-carry/s15b.sh
