"""NetworkPolicies of aksgpu's system namespace: no ingress by default, then the DCGM exporter's
metrics port from its scraper and the gate's watchdog only, and the acceptance run's pods to each
other (torchrun's rendezvous and NCCL's sockets). With the bundled Prometheus (its chart's server
and kube-state-metrics run in the same namespace), kube-state-metrics's port from the server only;
nothing is let in to the server: it is queried through `kubectl port-forward`, which enters from
the node, and traffic from a pod's own node is always allowed ("traffic to and from the node where
a Pod is running is always allowed", kubernetes.io/docs/concepts/services-networking/network-policies,
checked 2026-11-27). A client of its own (Grafana, say) needs a NetworkPolicy that admits it: they add up.

A NetworkPolicy does nothing on a cluster without a network policy engine (AKS networkProfile
networkPolicy none: "Network policies will not be enforced", the AKS API's NetworkPolicy enum;
https://learn.microsoft.com/azure/aks/use-network-policies, checked 2026-11-27: "All pods in an AKS
cluster can send and receive traffic without limitations, by default"); aksgpu declares them anyway
(they start to hold once an engine is on) and `aksgpu validate` warns (spec/in_cluster.py).

Policies only select pods in their own namespace; the GPU Operator's namespace is left to the operator."""

from __future__ import annotations

from typing import Any

from aksgpu.components.kubernetes.fabric_acceptance_objects import RUN
from aksgpu.components.kubernetes.gpu_gate_jobs import WATCHDOG
from aksgpu.components.kubernetes.gpu_metrics import EXPORTER_APP_LABEL, _exporter_port
from aksgpu.components.kubernetes.objects import metadata
from aksgpu.spec import ClusterSpec

DENY = "aksgpu-deny-ingress"
METRICS = "aksgpu-allow-metrics-scrape"
ACCEPTANCE_PEERS = "aksgpu-allow-acceptance-peers"
KUBE_STATE_METRICS = "aksgpu-allow-kube-state-metrics"
# The bundled Prometheus's Helm release, and the labels its chart gives the pods aksgpu's policies
# select (prometheus-community/helm-charts at prometheus-29.27.0, ca06aaef8a20: charts/prometheus
# templates/_helpers.tpl prometheus.server.matchLabels = component (values server.name, "server"),
# name (the chart's name, "prometheus", no nameOverride) and instance (the release); the
# kube-state-metrics chart 8.4.x it depends on, templates/_helpers.tpl kube-state-metrics.selectorLabels
# and values service.port 8080, the port its deployment.yaml names http and the server's
# kubernetes-service-endpoints job scrapes). Checked 2026-11-27.
PROMETHEUS_RELEASE = "aksgpu-prometheus"
PROMETHEUS_SERVER_LABELS = {"app.kubernetes.io/component": "server", "app.kubernetes.io/name": "prometheus",
                            "app.kubernetes.io/instance": PROMETHEUS_RELEASE}
KUBE_STATE_METRICS_LABELS = {"app.kubernetes.io/name": "kube-state-metrics",
                             "app.kubernetes.io/instance": PROMETHEUS_RELEASE}
KUBE_STATE_METRICS_PORT = 8080
# Azure Monitor managed Prometheus scrapes PodMonitor targets from its replica pods, the Deployment
# ama-metrics in kube-system whose pods carry rsName: ama-metrics (Azure/prometheus-collector
# otelcollector/deploy/addon-chart/azure-monitor-metrics-addon/templates/ama-metrics-deployment.yaml
# at 036620f5, checked 2026-11-27; its per-node DaemonSet, dsName: ama-metrics-node, scrapes only the
# default node targets). kubernetes.io/metadata.name is the label the API server sets on every namespace.
MANAGED_PROMETHEUS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"rsName": "ama-metrics"}},
}


def scraper_peers(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Who may read the exporter's metrics port: the scraper (if any) and the gate's watchdog, which
    reads the exporters for its cordon conditions."""
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": WATCHDOG}}}]
    scraper = spec.gpu_health.effective_scraper(spec.monitoring.managed_prometheus)
    if scraper == "managedPrometheus":
        peers.insert(0, MANAGED_PROMETHEUS_PEER)
    elif scraper == "bundled":
        peers.insert(0, {"podSelector": {"matchLabels": dict(PROMETHEUS_SERVER_LABELS)}})
    return peers


def declares_policies(spec: ClusterSpec) -> bool:
    """Whether aksgpu declares the policies (with the in-cluster software, whatever the scraper)."""
    return spec.in_cluster.enabled


def network_policies(spec: ClusterSpec, namespace: str) -> list[dict[str, Any]]:
    """The system namespace's NetworkPolicies (metadata and spec), or none (declares_policies)."""
    if not declares_policies(spec):
        return []
    port = {"protocol": "TCP", "port": _exporter_port()}
    return [
        {"metadata": metadata(DENY, namespace), "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"metadata": metadata(METRICS, namespace), "spec": {
            "podSelector": {"matchLabels": dict(EXPORTER_APP_LABEL)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": scraper_peers(spec), "ports": [port]}]}},
        {"metadata": metadata(ACCEPTANCE_PEERS, namespace), "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": RUN}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": RUN}}}]}]}},
        *_bundled_prometheus_policies(spec, namespace),
    ]


def _bundled_prometheus_policies(spec: ClusterSpec, namespace: str) -> list[dict[str, Any]]:
    """With the bundled Prometheus: kube-state-metrics's port from the server only (the chart's
    Alertmanager, node exporter and pushgateway are off, bundled_prometheus_values)."""
    if spec.gpu_health.effective_scraper(spec.monitoring.managed_prometheus) != "bundled":
        return []
    return [{"metadata": metadata(KUBE_STATE_METRICS, namespace), "spec": {
        "podSelector": {"matchLabels": dict(KUBE_STATE_METRICS_LABELS)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": dict(PROMETHEUS_SERVER_LABELS)}}],
                     "ports": [{"protocol": "TCP", "port": KUBE_STATE_METRICS_PORT}]}]}}]
