# Shared by the tests/chart scripts (sourced). The tools come from the
# chart-venv that scripts/install-deps.sh builds. A missing tool skips the
# test (exit 77, ctest's SKIP_RETURN_CODE) on a developer machine and fails it
# when CI=true: CI must run every check.
ARGUS_CACHE_DIR=${ARGUS_CACHE_DIR:-/var/cache/argus}
CHART_VENV=${CHART_VENV:-$ARGUS_CACHE_DIR/chart-venv}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CHART="$REPO_ROOT/helm/argus"

missing_tool() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $1 not found ($2); CI=true, so a missing tool fails the test (run scripts/install-deps.sh)" >&2
    exit 1
  fi
  echo "SKIP: $1 not found ($2); run scripts/install-deps.sh" >&2
  exit 77
}

# need NAME PATH: PATH must be an executable, else skip or fail.
need() {
  [ -x "$2" ] || missing_tool "$1" "$2"
}
