"""NetworkPolicies of aksgpu's system namespace: no ingress by default, then the DCGM exporter's
metrics port from its scraper and the gate's watchdog only, and the acceptance run's pods to each
other (torchrun's rendezvous and NCCL's sockets).

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
    if spec.gpu_health.effective_scraper(spec.monitoring.managed_prometheus) == "managedPrometheus":
        peers.insert(0, MANAGED_PROMETHEUS_PEER)
    return peers


def declares_policies(spec: ClusterSpec) -> bool:
    """Whether aksgpu declares the policies: not with the bundled Prometheus, whose chart's own pods
    (server, alertmanager, kube-state-metrics) talk to each other in the same namespace on ports
    aksgpu does not pin."""
    return (spec.in_cluster.enabled
            and spec.gpu_health.effective_scraper(spec.monitoring.managed_prometheus) != "bundled")


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
    ]
