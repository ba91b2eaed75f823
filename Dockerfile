# The argus-agent image: the agent, argusctl and (when built with the CUPTI
# headers) libargus-cupti.so, on debian:bookworm-slim with only the runtime
# libraries. The Helm chart (helm/argus) runs it as a DaemonSet.
#
#   docker build -t ghcr.io/argus-gpu/argus-agent:0.1.0 .
#   # with the GPU layer's library (CUPTI 13 headers from a CUDA devel image):
#   docker build --build-arg CUPTI_FROM=cupti-headers -t ghcr.io/argus-gpu/argus-agent:0.1.0 .
#
# The BPF objects are compiled against the build machine's BTF
# (/sys/kernel/btf/vmlinux, as on a developer machine) and relocated by CO-RE on
# the node at load time, so the image runs on other kernels with BTF.

# Where the CUPTI headers come from: no-cupti (none: the image has no
# libargus-cupti.so) or cupti-headers (the CUDA devel image below). Only the
# stage named here is built or pulled.
ARG CUPTI_FROM=no-cupti
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04

# Empty header directories: CMake finds no CUPTI and skips the library.
FROM debian:bookworm-slim AS no-cupti
RUN mkdir -p /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include

# Headers only: libargus-cupti.so is compiled against them and dlopens the
# node's libcupti at run time; nothing from this image reaches the final one.
FROM ${CUDA_DEVEL_IMAGE} AS cupti-headers

FROM ${CUPTI_FROM} AS cuda

FROM debian:bookworm AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The build packages of scripts/install-deps.sh that CMake needs to configure
# and build these targets (the test frameworks too: the tests' CMake files
# require them). Versions come with Debian bookworm's point release: pinning
# exact versions would break the build at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config clang-14 llvm-14 libbpf-dev bpftool libelf-dev zlib1g-dev \
      prometheus-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev \
      libcpp-httplib-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev \
      libibverbs-dev systemtap-sdt-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cuda /usr/local/cuda/include /usr/local/cuda/include
COPY --from=cuda /usr/local/cuda/extras/CUPTI/include /usr/local/cuda/extras/CUPTI/include
WORKDIR /src
COPY . .
# Only the shipped targets; libargus-cupti.so where CMake found the headers.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DARGUS_FUZZ=OFF -DARGUS_CUDA_ROOT=/usr/local/cuda \
 && cmake --build /build -j"$(nproc)" --target argus-agent argusctl \
 && if cmake --build /build --target help | grep -qx '\.\.\. argus-cupti'; then \
      cmake --build /build -j"$(nproc)" --target argus-cupti; fi \
 && mkdir -p /out/bin /out/lib \
 && cp /build/bin/argus-agent /build/bin/argusctl /out/bin/ \
 && strip --strip-debug /out/bin/argus-agent /out/bin/argusctl \
 && if [ -f /build/lib/libargus-cupti.so ]; then \
      cp /build/lib/libargus-cupti.so /out/lib/ && strip --strip-debug /out/lib/libargus-cupti.so; fi

FROM debian:bookworm-slim
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The shared libraries `ldd argus-agent argusctl` names (libc, libstdc++,
# libgcc and zlib are in the base), and the verbs providers libibverbs loads
# for the node's HCAs (mlx5, ...).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libbpf1 libelf1 libbrotli1 libcpp-httplib0.11 libssl3 libspdlog1.10 libfmt9 \
      libprometheus-cpp-core1.0 libibverbs1 ibverbs-providers \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/ /usr/local/bin/
# The chart's cupti.install copies it from here onto the node.
COPY --from=build /out/lib/ /opt/argus/lib/
# Fail the build, not the node, when a library is missing.
RUN ! ldd /usr/local/bin/argus-agent /usr/local/bin/argusctl | grep 'not found' \
 && argus-agent --list-capabilities > /dev/null
LABEL org.opencontainers.image.title="argus-agent" \
      org.opencontainers.image.description="eBPF observability for GPU training ranks" \
      org.opencontainers.image.source="https://github.com/argus-gpu/argus" \
      org.opencontainers.image.version="0.1.0"
EXPOSE 9745
# Runs as root: in Kubernetes the capabilities the chart adds are effective
# only for uid 0 (no ambient capabilities there); the systemd unit runs it
# as a transient user with ambient capabilities instead.
ENTRYPOINT ["/usr/local/bin/argus-agent"]
CMD ["--listen", "0.0.0.0:9745"]
