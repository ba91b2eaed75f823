#!/usr/bin/env bash
# The Helm chart helm/argus, with the real tools, for every values file under
# helm/argus/ci/:
#   1. helm lint --strict (Helm 4) with the values file;
#   2. helm template (Helm 4), and the same under Helm 3: the outputs must be equal;
#   3. check_rendered.py: strict Kubernetes schemas (kubernetes-validate) at the
#      oldest version with every field the chart uses (1.30) and the newest (1.37),
#      the prometheus-operator CRD models for ServiceMonitor/PodMonitor/PrometheusRule,
#      and what the values ask for (flags, mounts, modes, Secrets, selectors, the
#      rules equal to rules/argus-rules.yaml, dashboards);
#   4. promtool check rules on the PrometheusRule's groups as rendered;
#   5. yamllint on the values files and the rendered output.
# Then bad values: each must be refused with its own message.
set -euo pipefail
cd "$(dirname "$0")"  # yamllint resolves `extends:` from the working directory
source ./lib.sh

HELM="$CHART_VENV/bin/helm"
HELM3="$CHART_VENV/bin/helm3"
PY="$CHART_VENV/bin/python"
YAMLLINT="$CHART_VENV/bin/yamllint"
need helm "$HELM"
need helm3 "$HELM3"
need python "$PY"
need yamllint "$YAMLLINT"
PROMTOOL=$(command -v promtool || true)
need promtool "${PROMTOOL:-/nonexistent/promtool}"
"$PY" -c 'import kubernetes_validate, cloudcoil.models.prometheus_operator' 2>/dev/null ||
  missing_tool "kubernetes-validate / cloudcoil-models-prometheus-operator" "$CHART_VENV"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
NS=monitoring
failures=0
step() {  # step NAME COMMAND...: run, report, count failures, go on
  local name=$1
  shift
  if "$@" > "$WORK/out" 2>&1; then
    echo "ok   $name"
  else
    echo "FAIL $name"
    sed 's/^/     /' "$WORK/out"
    failures=$((failures + 1))
  fi
}

shopt -s nullglob
values_files=("$CHART"/ci/*.yaml)
[ ${#values_files[@]} -gt 0 ] || { echo "FAIL: no values files under $CHART/ci" >&2; exit 1; }
echo "helm: $("$HELM" version --short), $("$HELM3" version --short); $(promtool --version 2>&1 | head -1)"

for values in "${values_files[@]}"; do
  name=$(basename "$values" .yaml)
  out="$WORK/$name.yaml"
  echo "== $name"
  step "helm lint --strict" "$HELM" lint --strict "$CHART" -f "$values"
  step "helm3 lint --strict" "$HELM3" lint --strict "$CHART" -f "$values"
  step "helm template" sh -c '"$1" template argus "$2" --namespace "$3" -f "$4" > "$5"' _ "$HELM" "$CHART" "$NS" "$values" "$out"
  step "NOTES.txt renders (helm install --dry-run=client)" sh -c \
    '"$1" install argus "$2" --namespace "$3" -f "$4" --dry-run=client > "$5.install" && grep -q "^NOTES:" "$5.install"' \
    _ "$HELM" "$CHART" "$NS" "$values" "$out"
  # Helm 3 and 4 differ only in blank lines between documents: compare the objects.
  step "helm3 template renders the same objects" sh -c \
    '"$1" template argus "$2" --namespace "$3" -f "$4" > "$5.helm3" && "$6" -c "$7" "$5" "$5.helm3"' \
    _ "$HELM3" "$CHART" "$NS" "$values" "$out" "$PY" '
import sys, yaml
a, b = ([d for d in yaml.safe_load_all(open(f)) if d] for f in sys.argv[1:3])
if a != b:
    sys.exit(f"Helm 3 renders other objects: {len(a)} vs {len(b)} documents, first difference at " +
             str(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))))
print(len(a), "objects, equal")
'

  step "schemas and values ($("$PY" -c 'import kubernetes_validate; print("kubernetes-validate", kubernetes_validate.__version__)' 2>/dev/null || echo kubernetes-validate))" \
    "$PY" ./check_rendered.py --chart "$CHART" --values "$values" --rendered "$out" \
    --namespace "$NS" --rules-out "$WORK/$name.rules.yaml" --kube-version 1.30.0 --kube-version 1.37.0
  if [ -f "$WORK/$name.rules.yaml" ]; then
    step "promtool check rules (rendered PrometheusRule)" "$PROMTOOL" check rules "$WORK/$name.rules.yaml"
  fi
  step "yamllint (values file)" "$YAMLLINT" --strict -c yamllint.yaml "$values"
  step "yamllint (rendered output)" "$YAMLLINT" --strict -c yamllint-rendered.yaml "$out"
done

echo "== a chart without dashboards/*.json"
# The dashboards are files of their own; the chart must render without any.
cp -r "$CHART" "$WORK/no-dashboards"
rm -f "$WORK/no-dashboards"/dashboards/*.json
step "helm lint --strict" "$HELM" lint --strict "$WORK/no-dashboards"
step "helm template, no dashboard ConfigMap" sh -c \
  '"$1" template argus "$2" --namespace "$3" > "$4" && ! grep -q "^kind: ConfigMap" "$4"' \
  _ "$HELM" "$WORK/no-dashboards" "$NS" "$WORK/no-dashboards.yaml"
step "schemas and values" "$PY" ./check_rendered.py --chart "$WORK/no-dashboards" \
  --values "$CHART/ci/default-values.yaml" --rendered "$WORK/no-dashboards.yaml" --namespace "$NS" \
  --rules-out "$WORK/no-dashboards.rules.yaml" --kube-version 1.37.0

echo "== chart files"
step "yamllint values.yaml, Chart.yaml, examples/" "$YAMLLINT" --strict -c yamllint.yaml \
  "$CHART/values.yaml" "$CHART/Chart.yaml" "$CHART/examples"
step "examples/ pass kubernetes-validate --strict" "$CHART_VENV/bin/kubernetes-validate" --strict --quiet \
  -k 1.30.0 "$CHART"/examples/*.yaml
step "values.yaml: a comment above every key; README.md lists every key" "$PY" ./check_values_docs.py "$CHART"
step "values.schema.json is JSON" "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))' "$CHART/values.schema.json"

# Bad values: helm must refuse each, naming the problem.
refused() {  # refused MESSAGE-REGEX HELM-ARGS...
  local want=$1
  shift
  if "$HELM" template argus "$CHART" --namespace "$NS" "$@" > "$WORK/bad" 2>&1; then
    echo "rendered, but should have been refused: $*"
    return 1
  fi
  grep -Eq "$want" "$WORK/bad" || { echo "refused without naming '$want':"; cat "$WORK/bad"; return 1; }
}
echo "== bad values are refused"
step "securityMode outside the enum" refused "securityMode.*(privileged|capabilities)" --set securityMode=root
step "podInfo.source outside the enum" refused "podInfo/source" --set podInfo.source=kubelet
step "an unknown top-level key" refused "additional properties 'hostpid' not allowed" --set hostpid=true
step "an unknown nested key" refused "additional properties 'honorlabels' not allowed" --set serviceMonitor.honorlabels=true
step "a capability without CAP_" refused "capabilities/add" --set 'capabilities.add={BPF}'
step "a bad scrape interval" refused "serviceMonitor/interval" --set serviceMonitor.interval=15
step "auth without a token" refused "auth.enabled needs auth.token or auth.existingSecret" --set auth.enabled=true
step "tls without a certificate" refused "tls.enabled needs tls.cert and tls.key" --set tls.enabled=true --set tls.cert=x
step "ServiceMonitor without the Service" refused "serviceMonitor.enabled needs service.enabled" --set service.enabled=false

echo "$failures failed"
[ "$failures" -eq 0 ]
