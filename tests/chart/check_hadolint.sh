#!/usr/bin/env bash
# hadolint on the image's Dockerfile: every finding fails, down to style level
# (the two apt version-pinning warnings are ignored in the Dockerfile itself,
# each with its reason). No docker daemon is needed, and the image is not built.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
HADOLINT="$CHART_VENV/bin/hadolint"
need hadolint "$HADOLINT"
echo "$("$HADOLINT" --version)"
"$HADOLINT" --failure-threshold style "$REPO_ROOT/Dockerfile"
echo "ok   hadolint: no findings in Dockerfile"
