#!/usr/bin/env bash
# Installs every Debian package Argus builds, tests and benches with.
# Idempotent: packages already present are skipped; safe to run any number of times.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git make
  clang-14 libclang-rt-14-dev llvm-14 clang libbpf-dev bpftool libelf-dev zlib1g-dev
  prometheus-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libcpp-httplib-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libibverbs-dev rdma-core systemtap-sdt-dev
  prometheus prometheus-node-exporter
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
  bpftrace curl python3 util-linux procps
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
