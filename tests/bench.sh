#!/usr/bin/env bash
# `make bench`: every benchmark of the project, one command per line; each
# prints its own table. Add yours as a new line. Record results in
# docs/PERF.md with the exact command and the machine.
set -eu
BUILD=${BUILD:-build}

"$BUILD"/bin/tandem-transfer-bench
