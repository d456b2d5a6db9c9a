"""GpuHealth's passive side: the DCGM exporter (aksgpu's DaemonSet on driver Install pools; the GPU
Operator's on driver None pools) with aksgpu's metric list, its scrape by managed Prometheus (a
PodMonitor of Azure's azmonitoring.coreos.com group) or by a bundled Prometheus, the alert rules
for the conditions that should take a node out, and the cordon conditions the gate's watchdog reads
from them."""

from __future__ import annotations

from typing import Any

import yaml

from aksgpu import catalog
from aksgpu.components.kubernetes.gpu_software import DCGM_METRICS_CONFIG, device_plugin_targets, operator_targets
from aksgpu.components.kubernetes.objects import (
    GPU_OPERATOR_NAMESPACE,
    HEALTH_LABEL,
    daemonset,
    image,
    metadata,
    pool_affinity,
    pool_tolerations,
)
from aksgpu.spec import ClusterSpec


EXPORTER = "dcgm-exporter"
# The label the GPU Operator gives its exporter pods; aksgpu's exporter carries it too, so one
# scrape selector covers both.
EXPORTER_APP_LABEL = {"app": "nvidia-dcgm-exporter"}


# Why the DCGM exporter and the GPU checks are excepted from workload policies (shown on each
# object as a policy.aksgpu.io/<rule> annotation; README "Security baseline and policies").
EXPORTER_EXCEPTIONS = {
    "k8s-non-root": "DCGM reads GPU state and profiling counters as root, as NVIDIA's dcgm-exporter manifest runs it.",
    "k8s-capabilities": "SYS_ADMIN: DCGM's profiling metrics (DCGM_FI_PROF_*) need it, as in NVIDIA's manifest.",
    "k8s-host-path": "/var/lib/kubelet/pod-resources, read-only: the kubelet's pod-resources socket maps each GPU "
                     "to the pod using it.",
    "k8s-read-only-root-fs": "NVIDIA's dcgm-exporter manifest does not set a read-only root filesystem; not "
                             "verified here that the exporter runs with one.",
}


def exporter_daemonset(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """aksgpu's DCGM exporter on the driver Install pools (the operator runs its own elsewhere),
    shaped like NVIDIA's dcgm-exporter.yaml, reading aksgpu's metric list from a ConfigMap."""
    metrics = spec.gpu_health.metrics
    targets = device_plugin_targets(spec)
    # With the gate on, from the verdict on: no second DCGM client while the check runs.
    # Admitted nodes, and failed ones: a node cordoned on a passive signal keeps its running pods,
    # which stay watched; a failed node's metrics help its diagnosis. Never during a check.
    admitted = ([{"key": HEALTH_LABEL, "operator": "In", "values": ["passed", "unchecked", "failed"]}]
                if spec.gpu_health.gate.enabled else [])
    port = _exporter_port()
    return daemonset(EXPORTER, namespace, {
        "affinity": pool_affinity(targets, *admitted),
        "tolerations": pool_tolerations(targets),
        "priorityClassName": "system-node-critical",
        "automountServiceAccountToken": False,
        "containers": [{
            "name": EXPORTER,
            "image": image("dcgmExporter", metrics.exporter_version),
            "env": [
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                # Every GPU of the node, without requesting any from the device plugin.
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "DCGM_EXPORTER_LISTEN", "value": f":{port}"},
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/aksgpu/dcgm-metrics.csv"},
                {"name": "DCGM_EXPORTER_INTERVAL", "value": str(metrics.interval_seconds * 1000)},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            "ports": [{"name": "metrics", "containerPort": port}],
            # SYS_ADMIN: DCGM's profiling metrics (DCGM_FI_PROF_*) need it (NVIDIA's manifest).
            "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "allowPrivilegeEscalation": False,
                                "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            # /health on the metrics port, as NVIDIA's chart probes both (NVIDIA/dcgm-exporter
            # deployment/templates/daemonset.yaml at 00673efa, checked 2026-11-27: livenessProbe and
            # readinessProbe httpGet /health; values.yaml livenessProbe initialDelaySeconds 45). The
            # liveness probe waits longer and tolerates three misses: DCGM starts slowly on 8-GPU nodes.
            "readinessProbe": {"httpGet": {"path": "/health", "port": port},
                               "initialDelaySeconds": 15, "periodSeconds": 15},
            "livenessProbe": {"httpGet": {"path": "/health", "port": port},
                              "initialDelaySeconds": 45, "periodSeconds": 30, "failureThreshold": 3},
            "volumeMounts": [
                {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
                {"name": "metrics-list", "mountPath": "/etc/dcgm-exporter/aksgpu", "readOnly": True},
            ],
        }],
        "volumes": [
            {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}},
            {"name": "metrics-list", "configMap": {"name": DCGM_METRICS_CONFIG}},
        ],
    }, extra_labels=EXPORTER_APP_LABEL, exceptions=EXPORTER_EXCEPTIONS)


def _exporter_port() -> int:
    return int(catalog.load("in_cluster")["dcgmExporter"]["port"])


def exporter_namespaces(spec: ClusterSpec, system_namespace: str) -> list[str]:
    found = []
    if device_plugin_targets(spec):
        found.append(system_namespace)
    if operator_targets(spec):
        found.append(GPU_OPERATOR_NAMESPACE)
    return found


def pod_monitor(spec: ClusterSpec, namespace: str) -> dict[str, Any]:
    """The PodMonitor Azure Monitor managed Prometheus reads (its own azmonitoring.coreos.com group,
    prometheus-metrics-scrape-crd.md), for both exporters."""
    interval = f"{spec.gpu_health.metrics.interval_seconds}s"
    return {
        "apiVersion": "azmonitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata("aksgpu-dcgm-exporter", namespace),
        "spec": {
            "namespaceSelector": {"matchNames": exporter_namespaces(spec, namespace)},
            "selector": {"matchLabels": dict(EXPORTER_APP_LABEL)},
            # The pod's node on every series and on up, as the bundled scrape job does: GpuMetricsMissing
            # joins up with kube-state-metrics' node label (the CRD's podMetricsEndpoints[].relabelings).
            "podMetricsEndpoints": [{"port": "metrics", "interval": interval, "scrapeTimeout": "10s",
                                     "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                                      "targetLabel": "node", "action": "replace"}]}],
            # The limits Azure's scrape-CRD documentation asks every custom resource to set.
            "labelLimit": 63,
            "labelNameLengthLimit": 511,
            "labelValueLengthLimit": 1023,
        },
    }


def scrape_job(spec: ClusterSpec, system_namespace: str) -> dict[str, Any]:
    """The same scrape as a plain Prometheus job, for the bundled Prometheus."""
    return {
        "job_name": "aksgpu-dcgm-exporter",
        "scrape_interval": f"{spec.gpu_health.metrics.interval_seconds}s",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": exporter_namespaces(spec,
                                                                                              system_namespace)}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "nvidia-dcgm-exporter", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def alert_rules() -> list[dict[str, Any]]:
    """aksgpu's GPU alert rules (aksgpu/catalog/gpu_alerts.yaml), expressions expanded."""
    table = catalog.load("gpu_alerts")
    xids = "|".join(str(xid) for xid in table["nodeXids"])
    return [{**rule, "expression": rule["expression"].replace("NODE_XIDS", xids)} for rule in table["rules"]]


def cordon_conditions() -> list[dict[str, Any]]:
    """The alert rules' cordon blocks (gpu_alerts.yaml), for the passive remediation to test on one
    scrape of a node's DCGM exporter: {"alert", "metric", "above"} and, where a label narrows it,
    "label" with "values", the list the block names expanded to strings. The node is cordoned when
    a sample of `metric` is above `above` (and its `label` is one of `values`)."""
    table = catalog.load("gpu_alerts")
    found = []
    for rule in table["rules"]:
        block = rule.get("cordon")
        if block is None:
            continue
        condition = {"alert": rule["alert"], "metric": block["metric"], "above": block["above"]}
        if "label" in block:
            condition["label"] = block["label"]
            condition["values"] = [str(value) for value in table[block["values"]]]
        found.append(condition)
    return found


def _minutes(text: str) -> int:
    return int(str(text).removesuffix("m"))


def bundled_prometheus_values(spec: ClusterSpec, system_namespace: str) -> dict[str, Any]:
    """Values of prometheus-community/prometheus (keys of its values.yaml at 29.27.0): one server
    scraping the exporters and evaluating aksgpu's rules; no Alertmanager (route the alerts with
    your own), no node exporter or pushgateway."""
    rules = [{"alert": rule["alert"], "expr": rule["expression"],
              **({"for": rule["for"]} if _minutes(rule["for"]) else {}),
              "labels": {"severity": str(rule["severity"])},
              "annotations": {"summary": f"{rule['alert']} on {{{{ $labels.node }}}}", "description": rule["reason"]}}
             for rule in alert_rules()] if spec.gpu_health.alerts.enabled else []
    values: dict[str, Any] = {
        "alertmanager": {"enabled": False},
        "prometheus-node-exporter": {"enabled": False},
        "prometheus-pushgateway": {"enabled": False},
        # GpuMetricsMissing reads its kube_node_status_capacity and kube_node_spec_taint.
        "kube-state-metrics": {"enabled": True},
        "server": {"retention": "15d", "persistentVolume": {"enabled": True, "size": "50Gi"}},
        "extraScrapeConfigs": yaml.safe_dump([scrape_job(spec, system_namespace)], sort_keys=False),
    }
    if rules:
        values["serverFiles"] = {"alerting_rules.yml": {"groups": [{"name": "aksgpu-gpu-health", "rules": rules}]}}
    return values
