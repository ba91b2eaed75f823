#!/usr/bin/env python3
"""Checks one `helm template` output of helm/argus against the values it came from.

Run with the chart-venv's python (scripts/install-deps.sh):
  check_rendered.py --chart helm/argus --values ci/X.yaml --rendered out.yaml \
      --rules-out rules.yaml --kube-version 1.30.0 --kube-version 1.37.0

What it checks (each failure is one line; exit 1 if any):
  - every document parses, with no duplicate keys;
  - built-in kinds: kubernetes-validate in strict mode (unknown fields are errors)
    against each --kube-version;
  - ServiceMonitor, PodMonitor, PrometheusRule: the prometheus-operator CRD models
    (cloudcoil-models-prometheus-operator, generated from the CRDs' OpenAPI schemas:
    types, enums, required fields), plus a round trip that reports any key the
    schema does not know;
  - what the values ask for is what was rendered: the agent's flags and mounts,
    the security mode, probes, the Secret wiring, selectors that match, the
    PrometheusRule's groups equal to rules/argus-rules.yaml (with the runbook base
    and extra alert labels applied), one dashboard ConfigMap per JSON file.
The PrometheusRule's groups are written to --rules-out for `promtool check rules`.
"""
import argparse
import copy
import glob
import json
import os
import sys

import yaml

ERRORS = []
CRD_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
DEFAULT_RUNBOOK_BASE = "https://github.com/argus-gpu/argus/blob/main/docs/runbooks"


def fail(msg):
    ERRORS.append(msg)


def expect(cond, msg):
    if not cond:
        fail(msg)
    return cond


class NoDuplicatesLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


NoDuplicatesLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def merge_values(base, over):
    """Helm's merge: maps merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_values(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def unknown_keys(given, known, path=""):
    """Keys in `given` that the model dropped (it ignores what its schema does not name)."""
    found = []
    if isinstance(given, dict) and isinstance(known, dict):
        for k, v in given.items():
            if k not in known:
                found.append(f"{path}.{k}")
            else:
                found += unknown_keys(v, known[k], f"{path}.{k}")
    elif isinstance(given, list) and isinstance(known, list):
        for i, (g, k) in enumerate(zip(given, known)):
            found += unknown_keys(g, k, f"{path}[{i}]")
    return found


def validate_builtin(doc, versions):
    import kubernetes_validate

    for v in versions:
        try:
            kubernetes_validate.validate(doc, v, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail(f"{doc['kind']}/{doc['metadata']['name']} (Kubernetes {v}): {e.message} at {list(e.path)}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
            fail(f"{doc['kind']}/{doc['metadata']['name']} (Kubernetes {v}): no schema: {e}")


def validate_crd(doc):
    import pydantic
    from cloudcoil.models.prometheus_operator import v1

    name = f"{doc['kind']}/{doc['metadata']['name']}"
    expect(doc.get("apiVersion") == "monitoring.coreos.com/v1", f"{name}: apiVersion {doc.get('apiVersion')}")
    try:
        model = getattr(v1, doc["kind"]).model_validate(doc)
    except pydantic.ValidationError as e:
        fail(f"{name}: {e}")
        return
    back = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    for k in unknown_keys(doc, back):
        fail(f"{name}: unknown field {k}")


def expected_groups(chart, values):
    text = open(os.path.join(chart, "rules", "argus-rules.yaml")).read()
    base = values["prometheusRule"]["runbookBaseUrl"].rstrip("/")
    groups = yaml.safe_load(text.replace(DEFAULT_RUNBOOK_BASE, base))["groups"]
    extra = values["prometheusRule"].get("additionalRuleLabels") or {}
    for g in groups:
        for r in g["rules"]:
            if "alert" in r and extra:
                r["labels"] = {**(r.get("labels") or {}), **extra}
    return groups


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, want):
    found = by_kind(docs, kind)
    if want:
        expect(len(found) == 1, f"expected one {kind}, found {len(found)}")
    else:
        expect(not found, f"expected no {kind}, found {len(found)}")
    return found[0] if len(found) == 1 else None


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_daemonset(ds, values, docs, namespace):
    spec = ds["spec"]["template"]["spec"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    expect(matches(ds["spec"]["selector"]["matchLabels"], pod_labels), "DaemonSet selector does not match its pods")
    c = spec["containers"][0]
    args = c["args"]
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []) + [m for ic in spec.get("initContainers", []) for m in ic.get("volumeMounts", [])]:
        expect(m["name"] in vols, f"mount {m['mountPath']} names no volume {m['name']}")

    def host_mount(path, host, read_only=True):
        m = mounts.get(path)
        if not expect(m is not None, f"no mount at {path}"):
            return
        hp = vols.get(m["name"], {}).get("hostPath", {})
        expect(hp.get("path") == host, f"{path} is not the node's {host} ({hp})")
        expect(m.get("readOnly") is read_only, f"{path} readOnly is {m.get('readOnly')}")

    def has_arg(a):
        expect(a in args, f"agent args lack {a}: {args}")

    has_arg("--proc-root=/host/proc")
    host_mount("/host/proc", "/proc")
    has_arg("--sysfs-root=/host/sys")
    host_mount("/host/sys", "/sys")
    host_mount("/sys/fs/bpf", "/sys/fs/bpf")
    host_mount("/sys/kernel/tracing", "/sys/kernel/tracing")
    has_arg(f"--listen=0.0.0.0:{values['port']}")
    if values["kmsg"]["enabled"]:
        has_arg("--kmsg=/dev/kmsg")
        host_mount("/dev/kmsg", "/dev/kmsg")
    else:
        has_arg("--kmsg=off")
        expect("/dev/kmsg" not in mounts, "/dev/kmsg mounted with kmsg off")
    src = values["podInfo"]["source"]
    has_arg(f"--pod-info={src}")
    if src == "logs":
        for key, flag in (("podLogsDir", "--pod-logs-dir"), ("containerLogsDir", "--container-logs-dir")):
            d = values["podInfo"][key]
            has_arg(f"{flag}={d}")
            host_mount(d, d)
    expect(spec.get("automountServiceAccountToken") is (src == "apiserver"),
           f"automountServiceAccountToken {spec.get('automountServiceAccountToken')} with podInfo.source {src}")
    env = {e["name"]: e for e in c.get("env", [])}
    expect(env.get("ARGUS_NODE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
           "ARGUS_NODE is not the downward API's spec.nodeName")
    port = {p["name"]: p for p in c["ports"]}.get("metrics")
    expect(port and port["containerPort"] == values["port"], f"container port metrics is not {values['port']}")
    scheme = "HTTPS" if values["tls"]["enabled"] else "HTTP"
    for probe in ("livenessProbe", "readinessProbe"):
        g = c.get(probe, {}).get("httpGet", {})
        expect(g.get("path") == "/healthz" and g.get("port") == "metrics" and g.get("scheme") == scheme,
               f"{probe} is not GET {scheme} /healthz on port metrics: {g}")
    expect(spec.get("priorityClassName") == values["priorityClassName"], "priorityClassName")
    expect(spec.get("hostPID") is values["hostPID"], "hostPID")
    expect(spec.get("hostNetwork") is values["hostNetwork"], "hostNetwork")
    expect(spec.get("tolerations", []) == values["tolerations"], "tolerations differ from the values")
    expect(spec.get("nodeSelector", {}) == values["nodeSelector"], "nodeSelector differs from the values")
    expect(spec.get("terminationGracePeriodSeconds") == values["terminationGracePeriodSeconds"], "grace period")
    expect(ds["spec"]["updateStrategy"] == values["updateStrategy"], "updateStrategy")
    sc = c["securityContext"]
    if values["securityMode"] == "capabilities":
        want = [x.removeprefix("CAP_") for x in values["capabilities"]["add"]]
        expect(sc.get("privileged") is False, "capabilities mode: privileged is not false")
        expect(sc.get("allowPrivilegeEscalation") is False, "capabilities mode: allowPrivilegeEscalation")
        expect(sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities mode: does not drop ALL")
        expect(sc.get("capabilities", {}).get("add") == want, f"capabilities add {sc.get('capabilities')} != {want}")
        expect(sc.get("seccompProfile", {}).get("type") == values["capabilities"]["seccompProfile"], "seccompProfile")
    else:
        expect(sc.get("privileged") is True, "privileged mode: privileged is not true")
        expect("capabilities" not in sc, "privileged mode lists capabilities")
    expect(sc.get("readOnlyRootFilesystem") is True, "root filesystem not read-only")

    def secret_mount(flag_value, mount_dir, secret_name):
        m = mounts.get(mount_dir)
        if expect(m is not None, f"no mount at {mount_dir} for {flag_value}"):
            expect(vols[m["name"]].get("secret", {}).get("secretName") == secret_name,
                   f"{mount_dir} is not Secret {secret_name}")

    fullname = ds["metadata"]["name"]
    if values["auth"]["enabled"]:
        has_arg("--auth-token-file=/etc/argus/auth/token")
        name = values["auth"]["existingSecret"] or f"{fullname}-auth"
        secret_mount("--auth-token-file", "/etc/argus/auth", name)
        if not values["auth"]["existingSecret"]:
            s = [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == name]
            expect(len(s) == 1 and "token" in s[0].get("data", {}), f"no Secret {name} with key token")
    else:
        expect(not any(a.startswith("--auth-token-file") for a in args), "--auth-token-file without auth")
    if values["tls"]["enabled"]:
        has_arg("--tls-cert=/etc/argus/tls/tls.crt")
        has_arg("--tls-key=/etc/argus/tls/tls.key")
        name = values["tls"]["existingSecret"] or f"{fullname}-tls"
        secret_mount("--tls-cert", "/etc/argus/tls", name)
        if not values["tls"]["existingSecret"]:
            s = [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == name]
            expect(len(s) == 1 and s[0]["type"] == "kubernetes.io/tls", f"no kubernetes.io/tls Secret {name}")
    else:
        expect(not any(a.startswith("--tls-") for a in args), "--tls-* without tls")
    if values["agent"]["debugRoutes"]:
        has_arg("--debug-routes")
    inits = spec.get("initContainers", [])
    if values["cupti"]["install"]:
        expect(len(inits) == 1, "cupti.install: no init container")
        if inits:
            m = {x["mountPath"]: x for x in inits[0]["volumeMounts"]}.get("/host-lib")
            expect(m and vols[m["name"]]["hostPath"]["path"] == values["cupti"]["hostPath"],
                   "install-cupti does not write to cupti.hostPath")
    else:
        expect(not inits, "init containers without cupti.install")
    return pod_labels


def check_monitor(mon, values, key, namespace, target_labels, port_names, docs):
    v = values[key]
    name = f"{mon['kind']}/{mon['metadata']['name']}"
    expect(mon["metadata"]["namespace"] == (v["namespace"] or namespace), f"{name}: namespace")
    for k, val in (v["additionalLabels"] or {}).items():
        expect(mon["metadata"]["labels"].get(k) == val, f"{name}: label {k}={val} missing")
    expect(matches(mon["spec"]["selector"]["matchLabels"], target_labels), f"{name}: selector matches no target")
    expect(namespace in mon["spec"]["namespaceSelector"]["matchNames"], f"{name}: namespaceSelector")
    eps = mon["spec"]["endpoints" if key == "serviceMonitor" else "podMetricsEndpoints"]
    expect(len(eps) == 1, f"{name}: {len(eps)} endpoints")
    ep = eps[0]
    expect(ep["port"] in port_names, f"{name}: port {ep['port']} not among {port_names}")
    expect(ep["path"] == "/metrics", f"{name}: path")
    expect(ep["honorLabels"] is v["honorLabels"], f"{name}: honorLabels")
    expect(ep["interval"] == v["interval"], f"{name}: interval")
    expect(ep["scheme"] == ("https" if values["tls"]["enabled"] else "http"), f"{name}: scheme")
    rl = ep.get("relabelings", [])
    expect(rl and rl[0].get("sourceLabels") == ["__meta_kubernetes_pod_node_name"] and rl[0].get("targetLabel") == "node",
           f"{name}: first relabeling does not set node")
    rename = [{"sourceLabels": [x], "targetLabel": f"agent_{x}", "action": "replace"}
              for x in ("namespace", "pod", "container")] + [{"regex": "namespace|pod|container", "action": "labeldrop"}]
    if v["renameAgentLabels"]:
        expect(rl[1:5] == rename, f"{name}: renameAgentLabels: the agent's labels are not moved to agent_*")
        rl = rl[4:]
    else:
        expect(not any(r.get("targetLabel", "").startswith("agent_") for r in rl), f"{name}: agent_* without renameAgentLabels")
    expect(rl[1:] == (v["relabelings"] or []), f"{name}: user relabelings not kept")
    expect(ep.get("metricRelabelings", []) == (v["metricRelabelings"] or []), f"{name}: metricRelabelings")
    if values["tls"]["enabled"] and v["tlsConfig"]:
        expect(ep.get("tlsConfig") == v["tlsConfig"], f"{name}: tlsConfig")
    if values["auth"]["enabled"]:
        cred = ep.get("authorization", {}).get("credentials", {})
        fullname = next(d for d in docs if d["kind"] == "DaemonSet")["metadata"]["name"]
        want = (values["auth"]["existingSecret"], values["auth"]["secretKey"]) if values["auth"]["existingSecret"] \
            else (f"{fullname}-auth", "token")
        expect(ep.get("authorization", {}).get("type") == "Bearer" and (cred.get("name"), cred.get("key")) == want,
               f"{name}: authorization {ep.get('authorization')} is not the token Secret {want}")
    else:
        expect("authorization" not in ep, f"{name}: authorization without auth")


def check_dashboards(chart, values, docs, namespace):
    files = sorted(glob.glob(os.path.join(chart, "dashboards", "*.json")))
    cms = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["labels"].get(values["dashboards"]["label"])]
    if not values["dashboards"]["enabled"]:
        expect(not cms, "dashboard ConfigMaps with dashboards off")
        return
    expect(len(cms) == len(files), f"{len(cms)} dashboard ConfigMaps for {len(files)} dashboards/*.json")
    data = {}
    for cm in cms:
        expect(cm["metadata"]["labels"][values["dashboards"]["label"]] == values["dashboards"]["labelValue"],
               f"ConfigMap {cm['metadata']['name']}: label value")
        expect(cm["metadata"]["namespace"] == (values["dashboards"]["namespace"] or namespace), "dashboards namespace")
        for k, val in (values["dashboards"]["annotations"] or {}).items():
            expect(cm["metadata"].get("annotations", {}).get(k) == val, f"ConfigMap {cm['metadata']['name']}: {k}")
        data.update(cm["data"])
    uids = []
    for f in files:
        text = open(f).read()
        got = data.get(os.path.basename(f))
        if expect(got is not None, f"no ConfigMap holds {os.path.basename(f)}"):
            expect(got == text.removesuffix("\n"), f"{os.path.basename(f)} differs from the file")
            uids.append(json.loads(got).get("uid"))
    expect(len(set(uids)) == len(uids), f"dashboard uids not unique: {uids}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chart", required=True)
    ap.add_argument("--values", required=True)
    ap.add_argument("--rendered", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--rules-out", required=True)
    ap.add_argument("--kube-version", action="append", required=True)
    a = ap.parse_args()

    values = merge_values(yaml.safe_load(open(os.path.join(a.chart, "values.yaml"))),
                          yaml.safe_load(open(a.values)) or {})
    try:
        docs = [d for d in yaml.load_all(open(a.rendered), Loader=NoDuplicatesLoader) if d]
    except yaml.YAMLError as e:
        print(f"FAIL {a.values}: rendered output does not parse: {e}")
        return 1

    for d in docs:
        if d["kind"] in CRD_KINDS:
            validate_crd(d)
        else:
            validate_builtin(d, a.kube_version)

    ds = one(docs, "DaemonSet", True)
    pod_labels = check_daemonset(ds, values, docs, a.namespace) if ds else {}
    svc = one(docs, "Service", values["service"]["enabled"])
    if svc:
        expect(matches(svc["spec"]["selector"], pod_labels), "Service selector does not match the agent pods")
        p = svc["spec"]["ports"][0]
        expect(p["name"] == "metrics" and p["port"] == values["port"] and p["targetPort"] == "metrics",
               f"Service port {p}")
        if values["service"]["clusterIP"] == "None":
            expect(svc["spec"].get("clusterIP") == "None", "Service not headless")
        else:
            expect(svc["spec"].get("internalTrafficPolicy") == values["service"]["internalTrafficPolicy"],
                   "Service internalTrafficPolicy")
    sm = one(docs, "ServiceMonitor", values["serviceMonitor"]["enabled"])
    if sm and svc:
        check_monitor(sm, values, "serviceMonitor", a.namespace, svc["metadata"]["labels"],
                      [p["name"] for p in svc["spec"]["ports"]], docs)
    pm = one(docs, "PodMonitor", values["podMonitor"]["enabled"])
    if pm and ds:
        check_monitor(pm, values, "podMonitor", a.namespace, pod_labels,
                      [p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]], docs)

    pr = one(docs, "PrometheusRule", values["prometheusRule"]["enabled"])
    if pr:
        for k, val in (values["prometheusRule"]["additionalLabels"] or {}).items():
            expect(pr["metadata"]["labels"].get(k) == val, f"PrometheusRule: label {k}={val} missing")
        want = expected_groups(a.chart, values)
        expect(pr["spec"]["groups"] == want, "PrometheusRule groups differ from rules/argus-rules.yaml")
        base = values["prometheusRule"]["runbookBaseUrl"].rstrip("/")
        for g in pr["spec"]["groups"]:
            for r in g["rules"]:
                if "alert" in r:
                    expect(r.get("annotations", {}).get("runbook_url") == f"{base}/{r['alert']}.md",
                           f"{r['alert']}: runbook_url {r.get('annotations', {}).get('runbook_url')}")
        with open(a.rules_out, "w") as f:
            yaml.safe_dump({"groups": pr["spec"]["groups"]}, f, sort_keys=False)
    elif os.path.exists(a.rules_out):
        os.remove(a.rules_out)

    check_dashboards(a.chart, values, docs, a.namespace)

    apiserver = values["podInfo"]["source"] == "apiserver" and values["rbac"]["create"]
    role = one(docs, "ClusterRole", apiserver)
    binding = one(docs, "ClusterRoleBinding", apiserver)
    if role:
        expect(role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
               f"ClusterRole grants more or less than get/list/watch pods: {role['rules']}")
    if binding and ds:
        sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
        expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": a.namespace}],
               "ClusterRoleBinding subject is not the agent's ServiceAccount")
        expect(binding["roleRef"]["name"] == role["metadata"]["name"], "ClusterRoleBinding roleRef")
    sa = one(docs, "ServiceAccount", values["serviceAccount"]["create"])
    if sa:
        expect(sa.get("automountServiceAccountToken") is (values["podInfo"]["source"] == "apiserver"),
               "ServiceAccount automountServiceAccountToken")

    tests = [d for d in by_kind(docs, "Pod") if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    expect(len(tests) == (1 if values["service"]["enabled"] else 0), f"{len(tests)} helm test pods")
    for t in tests:
        if svc:
            expect(not matches(svc["spec"]["selector"], t["metadata"]["labels"]), "the Service selects the test pod")
        expect(t["spec"].get("tolerations", []) == values["tolerations"], "test pod tolerations differ")

    for e in ERRORS:
        print(f"FAIL {a.values}: {e}")
    kinds = sorted(d["kind"] for d in docs)
    print(f"{'FAIL' if ERRORS else 'ok'} {a.values}: {len(docs)} objects ({', '.join(kinds)}), {len(ERRORS)} problems")
    return 1 if ERRORS else 0


if __name__ == "__main__":
    sys.exit(main())
