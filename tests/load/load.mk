# The load generator and `make test-load`, included by the Makefile.
#
# The load generator (programs/loadgen_main.c -> build/bin/tandem-loadgen)
# is built with `make` and `make test`, so the normal suite can run a
# bounded load test too.
#
# `make test-load` runs tests/integration/test_load.sh on its own with
# LOAD_CLIENTS concurrent streaming clients (default 256, as in `make test`;
# 1000 or more works: the router is started with room for them).
LOAD_CLIENTS ?= 256

.PHONY: test-load
test-load: $(LIB) $(BINS)
	TANDEM_BUILD=$(BUILD) LOAD_CLIENTS=$(LOAD_CLIENTS) bash tests/integration/test_load.sh
