"""aksgpu's NetworkPolicies: deny ingress in the system namespace, the exporter's port from the
scraper and the watchdog only (components/kubernetes/network_policy.py)."""

from __future__ import annotations

from aksgpu.plan.manifests import kubernetes_objects, manifest
from aksgpu.spec import ClusterSpec
from aksgpu.spec.in_cluster import check_in_cluster
from tests.helpers import plan_spec, preset_spec


def _objects(spec: dict) -> list[dict]:
    return [manifest(resource) for resource in kubernetes_objects(plan_spec(spec))]


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
