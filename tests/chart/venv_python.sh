#!/usr/bin/env bash
# Runs a python script with the chart-venv's interpreter (PyYAML and friends),
# skipping or failing like the other tests/chart scripts when it is missing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need python "$CHART_VENV/bin/python"
exec "$CHART_VENV/bin/python" "$@"
