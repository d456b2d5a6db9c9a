"""aksgpu's NetworkPolicies: deny ingress in the system namespace, the exporter's port from the
scraper and the watchdog only, and with the bundled Prometheus kube-state-metrics's port from its
server only (components/kubernetes/network_policy.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from aksgpu.plan.manifests import kubernetes_objects, manifest
from aksgpu.spec import ClusterSpec
from aksgpu.spec.in_cluster import check_in_cluster
from tests.helpers import edit, preset_spec, shared_plan


def _objects(spec: dict) -> list[dict]:
    return [manifest(resource) for resource in kubernetes_objects(shared_plan(spec))]


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def test_the_system_namespace_denies_ingress_and_opens_the_metrics_port_to_the_scraper_only() -> None:
    spec = preset_spec("dev")
    spec["monitoring"]["managedPrometheus"] = True
    spec["gpuHealth"]["metrics"]["scraper"] = "managedPrometheus"
    objects = _objects(spec)
    policies = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "NetworkPolicy"}
    deny = policies["aksgpu-deny-ingress"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    exporter = next(o for o in objects if o.get("kind") == "DaemonSet" and o["metadata"]["name"] == "dcgm-exporter")
    assert deny["metadata"]["namespace"] == exporter["metadata"]["namespace"]
    pod_labels = exporter["spec"]["template"]["metadata"]["labels"]
    allow = policies["aksgpu-allow-metrics-scrape"]["spec"]
    assert _selects(allow["podSelector"], pod_labels)
    (rule,) = allow["ingress"]
    port = exporter["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port}]
    # Managed Prometheus's replica pods in kube-system, and the gate's watchdog; no one else.
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"rsName": "ama-metrics"}}} in rule["from"]
    assert all("namespaceSelector" not in peer or peer["podSelector"] == {"matchLabels": {"rsName": "ama-metrics"}}
               for peer in rule["from"])
    assert len(rule["from"]) == 2


def test_the_watchdog_that_reads_the_exporters_is_allowed() -> None:
    objects = _objects(preset_spec("training"))
    watchdog = next(o for o in objects if o.get("kind") == "CronJob" and o["metadata"]["name"].endswith("watchdog"))
    labels = watchdog["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    allow = next(o for o in objects if o["metadata"].get("name") == "aksgpu-allow-metrics-scrape")
    assert any(_selects(peer["podSelector"], labels) for peer in allow["spec"]["ingress"][0]["from"]
               if "namespaceSelector" not in peer)


def test_validate_warns_where_no_engine_enforces_the_policies() -> None:
    spec = preset_spec("training")
    spec["network"]["policy"] = "none"
    spec["network"]["dataplane"] = "azure"
    issues = [i for i in check_in_cluster(ClusterSpec.model_validate(spec)) if i.path == "network.policy"]
    assert issues and issues[0].severity == "warning"
    assert not [i for i in check_in_cluster(ClusterSpec.model_validate(preset_spec("training")))
                if i.path == "network.policy"]


# --- the bundled Prometheus: which pod reaches which port --------------------------------------

CHART = Path(__file__).resolve().parent / "data" / "prometheus-chart"


def _admits(policies: list[dict], pod: dict, port: int, peer: dict) -> bool:
    """NetworkPolicy ingress semantics (kubernetes.io network-policies): a pod no Ingress policy
    selects admits everything; a selected pod admits what at least one rule of one selecting policy
    admits. Pods and peers here are {"namespace", "labels"}; namespaces carry only their name label."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod["namespace"]
                 and "Ingress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod["labels"])]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = [entry["port"] for entry in rule.get("ports") or []]
            if ports and port not in ports:
                continue
            for source in rule.get("from") or []:
                namespace = source.get("namespaceSelector")
                in_namespace = (peer["namespace"] == policy["metadata"]["namespace"] if namespace is None
                                else _selects(namespace, {"kubernetes.io/metadata.name": peer["namespace"]}))
                if in_namespace and _selects(source.get("podSelector") or {}, peer["labels"]):
                    return True
    return False


def test_with_the_bundled_prometheus_only_its_server_reaches_the_exporter_and_kube_state_metrics() -> None:
    spec = edit(preset_spec("dev"), "gpuHealth.metrics.scraper", "bundled")
    spec["nodePools"].append({"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1})  # where the server runs
    plan = shared_plan(spec)
    objects = [manifest(resource) for resource in kubernetes_objects(plan)]
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    exporter = next(o for o in objects if o.get("kind") == "DaemonSet" and o["metadata"]["name"] == "dcgm-exporter")
    namespace = exporter["metadata"]["namespace"]
    (release,) = [r.inputs for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "prometheus"]
    assert release["namespace"] == namespace
    # The chart's pod labels (templates/_helpers.tpl: component = values server.name, name = the
    # chart's name, instance = the release), from the copied chart where it holds them.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    server = {"namespace": namespace, "labels": {
        "app.kubernetes.io/component": values["server"]["name"], "app.kubernetes.io/name": chart["name"],
        "app.kubernetes.io/instance": release["name"], "app.kubernetes.io/part-of": chart["name"]}}
    kube_state_metrics = {"namespace": namespace, "labels": {
        "app.kubernetes.io/name": "kube-state-metrics", "app.kubernetes.io/instance": release["name"]}}
    watchdog = {"namespace": namespace, "labels": {"app.kubernetes.io/name": "aksgpu-gpu-gate-watchdog"}}
    watchdog_job = next(o for o in objects if o.get("kind") == "CronJob" and o["metadata"]["name"].endswith("watchdog"))
    watchdog["labels"] = watchdog_job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    neighbour = {"namespace": namespace, "labels": {"app.kubernetes.io/name": "someone"}}
    team_pod = {"namespace": "research", "labels": dict(server["labels"])}  # the same labels, another namespace
    exporter_pod = {"namespace": namespace, "labels": exporter["spec"]["template"]["metadata"]["labels"]}
    exporter_port = exporter["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]

    assert _admits(policies, exporter_pod, exporter_port, server)
    assert _admits(policies, exporter_pod, exporter_port, watchdog)
    assert not _admits(policies, exporter_pod, exporter_port, neighbour)
    assert not _admits(policies, exporter_pod, exporter_port, team_pod)
    assert _admits(policies, kube_state_metrics, 8080, server)
    assert not _admits(policies, kube_state_metrics, 8081, server)  # its telemetry port: nobody scrapes it
    assert not _admits(policies, kube_state_metrics, 8080, neighbour)
    assert not _admits(policies, kube_state_metrics, 8080, team_pod)
    # The server admits no pod: it is queried through kubectl port-forward (from the node).
    for peer in (neighbour, team_pod, kube_state_metrics, watchdog):
        assert not _admits(policies, server, 9090, peer)


def test_validate_warns_without_an_engine_with_the_bundled_prometheus_too() -> None:
    spec = edit(preset_spec("training"), "gpuHealth.metrics.scraper", "bundled")
    spec["network"]["policy"] = "none"
    spec["network"]["dataplane"] = "azure"
    assert [i for i in check_in_cluster(ClusterSpec.model_validate(spec))
            if i.path == "network.policy" and i.severity == "warning"]
