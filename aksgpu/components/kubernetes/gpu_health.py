"""GpuHealth: passive and active health of the GPU nodes.

Passive: the DCGM exporter (aksgpu's DaemonSet on driver Install pools; the GPU Operator's on
driver None pools) with aksgpu's metric list, scraped by managed Prometheus (a PodMonitor of
Azure's azmonitoring.coreos.com group) or by a bundled Prometheus, and alert rules for the
conditions that should take a node out (Azure Monitor Prometheus rule groups, or the bundled
Prometheus's rules).

Active, the node gate (a GPU node's life):
  created -> a gate pod taints it with startup-taint.cluster-autoscaler.kubernetes.io/
  aksgpu-gpu-check and labels it aksgpu.io/gpu-health=pending (nothing advertises its GPUs until
  the verdict) -> the check runs once -> passed: taint removed, node admitted | failed: cordoned,
  labelled failed and with the failed check -> idle nodes re-checked by a CronJob per node shape
  -> a failed re-check cordons the node too; a watchdog fails nodes pending too long.
The steps that change the node are node_gate.py (shipped as a ConfigMap), narrowed by an admission
policy; the check is an image and command from the spec, with the contract in node_gate.py.

This module is the component, declaring what its siblings build: gpu_metrics.py (the passive
side), gpu_gate.py (the gate's DaemonSets), gpu_gate_jobs.py (the watchdog and the re-checks),
gpu_gate_access.py (the gate's rights, record and admission policy), and fabric_acceptance_objects.py
(the cross-node acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
from pulumi_azure_native import alertsmanagement

from aksgpu import catalog
from aksgpu.components.kubernetes import fabric_acceptance_objects as acceptance
from aksgpu.components.kubernetes.gpu_gate import GATE_PROGRAM, SCRIPT_CONFIG, gate_daemonsets
from aksgpu.components.kubernetes.gpu_gate_access import node_change_policy, node_gate_rbac, record_configmap
from aksgpu.components.kubernetes.gpu_gate_jobs import (
    RECHECK,
    RECHECK_PRIORITY,
    gate_watchdog,
    recheck_cronjob,
    recheck_groups,
)
from aksgpu.components.kubernetes import gpu_repair
from aksgpu.components.kubernetes.gpu_metrics import (
    _minutes,
    alert_rules,
    bundled_prometheus_values,
    exporter_daemonset,
    pod_monitor,
)
from aksgpu.components.kubernetes.gpu_software import DCGM_METRICS_CONFIG, device_plugin_targets, operator_targets
from aksgpu.components.kubernetes.network_policy import PROMETHEUS_RELEASE, declares_policies, network_policies
from aksgpu.components.kubernetes.objects import metadata, program_files
from aksgpu.components.kubernetes.rbac_resources import declare_admission_policy, declare_rbac
from aksgpu.spec import ClusterSpec


@dataclass
class GpuHealthArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    system_namespace: str
    namespace_resource: pulumi.Resource
    resource_group_name: pulumi.Input[str]
    prometheus_workspace_id: pulumi.Input[str] | None
    # The GPU Operator's release: the PodMonitor and rules cover its exporter once it exists.
    gpu_operator: pulumi.Resource | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The Azure Monitor workspace's region, where its rule groups go (None: the cluster's; a fleet's
    # workspace may be in another region).
    prometheus_location: pulumi.Input[str] | None = None
    # The repair loop's managed identity (gpuHealth.repair mode act), named on its service account.
    repair_client_id: pulumi.Input[str] | None = None
    # The cluster's resource ID, where the loop deletes nodes (agentPools/deleteMachines; mode act).
    repair_cluster_id: pulumi.Input[str] | None = None


class GpuHealth(pulumi.ComponentResource):
    """DCGM exporter, scrape configuration and alert rules; the node gate and re-checks."""

    def __init__(self, name: str, args: GpuHealthArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:GpuHealth", name, None, opts)
        spec = args.spec
        health = spec.gpu_health
        ns = args.system_namespace
        device_plugin_pools = device_plugin_targets(spec)
        operator_pools = operator_targets(spec)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource])
        after_operator = pulumi.ResourceOptions(
            parent=self, provider=args.provider,
            depends_on=[args.namespace_resource, *([args.gpu_operator] if args.gpu_operator else [])])
        if not device_plugin_pools and not operator_pools:
            self.register_outputs({})
            return
        scraper = health.effective_scraper(spec.monitoring.managed_prometheus)
        if health.metrics.enabled and device_plugin_pools:
            config = k8s.core.v1.ConfigMap(
                f"{name}-dcgm-metrics", metadata=metadata(DCGM_METRICS_CONFIG, ns),
                data={"dcgm-metrics.csv": catalog.text("dcgm_metrics.csv")}, opts=k8s_opts)
            manifest = exporter_daemonset(spec, ns)
            k8s.apps.v1.DaemonSet(f"{name}-dcgm-exporter", metadata=manifest["metadata"], spec=manifest["spec"],
                                  opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(
                                      depends_on=[config])))
        if scraper == "managedPrometheus":
            monitor = pod_monitor(spec, ns)
            k8s.apiextensions.CustomResource(
                f"{name}-pod-monitor", api_version=monitor["apiVersion"], kind=monitor["kind"],
                metadata=monitor["metadata"], spec=monitor["spec"], opts=after_operator)
            if health.alerts.enabled and args.prometheus_workspace_id is not None:
                self._azure_rule_group(name, spec, args)
        elif scraper == "bundled":
            chart = catalog.load("in_cluster")["prometheus"]
            k8s.helm.v3.Release(
                f"{name}-prometheus", name=PROMETHEUS_RELEASE, chart=chart["chart"], version=chart["version"],
                repository_opts={"repo": chart["repository"]}, namespace=ns,
                values=bundled_prometheus_values(spec, ns), opts=k8s_opts)
        for policy in network_policies(spec, ns):
            k8s.networking.v1.NetworkPolicy(f"{name}-{policy['metadata']['name'].removeprefix('aksgpu-')}",
                                            metadata=policy["metadata"], spec=policy["spec"], opts=k8s_opts)
        # The watchdog runs whatever the gate's setting: with the gate off it releases the nodes the
        # gate left tainted, and critical passive signals still cordon.
        self._node_gate(name, spec, args)
        if health.repair.enabled:
            _repair_resources(self, name, spec, args, k8s_opts)
        self.register_outputs({})

    def _acceptance(self, name: str, spec: ClusterSpec, args: GpuHealthArgs, ready: pulumi.ResourceOptions) -> None:
        _acceptance_resources(self, name, spec, args, ready)

    def _azure_rule_group(self, name: str, spec: ClusterSpec, args: GpuHealthArgs) -> None:
        actions = [{"action_group_id": group} for group in spec.gpu_health.alerts.action_group_ids]
        rules = [{
            "alert": rule["alert"],
            "expression": rule["expression"],
            # A rule with no hold time fires on its first evaluation.
            **({"for_": f"PT{_minutes(rule['for'])}M"} if _minutes(rule["for"]) else {}),
            "severity": rule["severity"],
            "annotations": {"reason": rule["reason"]},
            "labels": {"aksgpu_rule": rule["alert"]},
            "enabled": True,
            "resolve_configuration": {"auto_resolved": True, "time_to_resolve": "PT10M"},
            **({"actions": actions} if actions else {}),
        } for rule in alert_rules()]
        alertsmanagement.PrometheusRuleGroup(
            f"{name}-gpu-alerts",
            rule_group_name=f"aksgpu-gpu-health-{spec.name}",
            resource_group_name=args.resource_group_name,
            location=args.prometheus_location or spec.location,
            scopes=[args.prometheus_workspace_id],  # type: ignore[list-item]  # set when monitoring is on
            cluster_name=spec.name,
            description="aksgpu: GPU conditions that should take a node out (aksgpu/catalog/gpu_alerts.yaml)",
            enabled=True,
            interval="PT1M",
            rules=rules,  # type: ignore[arg-type]  # plain dicts for the SDK's Args
            tags=args.tags or None,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _node_gate(self, name: str, spec: ClusterSpec, args: GpuHealthArgs) -> None:
        ns = args.system_namespace
        base = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace_resource])
        health = spec.gpu_health
        daemonsets = gate_daemonsets(spec, ns) if health.gate.enabled else []
        created = declare_rbac(
            node_gate_rbac(ns, [d["metadata"]["name"] for d in daemonsets]),
            lambda obj: f"{name}-{obj['metadata']['name'].removeprefix('aksgpu-')}-{obj['kind'].lower()}", base,
            chained=True)
        script = k8s.core.v1.ConfigMap(f"{name}-gate-script", metadata=metadata(SCRIPT_CONFIG, ns),
                                       data=program_files(*GATE_PROGRAM), opts=base)
        record = record_configmap(ns)
        # Created empty; node_gate.py owns its data from then on.
        created.append(k8s.core.v1.ConfigMap(f"{name}-gate-record", metadata=record["metadata"],
                                             opts=pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(
                                                 ignore_changes=["data"]))))
        created.append(declare_admission_policy(f"{name}-node-policy", node_change_policy(ns),
                                                pulumi.ResourceOptions(parent=self, provider=args.provider)))
        ready = pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[*created, script]))
        for manifest in daemonsets:
            k8s.apps.v1.DaemonSet(f"{name}-{manifest['metadata']['name'].removeprefix('aksgpu-gpu-')}",
                                  metadata=manifest["metadata"], spec=manifest["spec"], opts=ready)
        watchdog = gate_watchdog(spec, ns)
        k8s.batch.v1.CronJob(f"{name}-gate-watchdog", metadata=watchdog["metadata"], spec=watchdog["spec"],
                             opts=ready)
        self._acceptance(name, spec, args, ready)
        if health.recheck.enabled:
            priority = k8s.scheduling.v1.PriorityClass(
                f"{name}-recheck-priority", metadata=metadata(RECHECK), value=RECHECK_PRIORITY,
                preemption_policy="Never", global_default=False,
                description="aksgpu GPU re-checks: run only on idle nodes, never preempt, never trigger a scale-up",
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
            for job_name, (targets, gpus, is_operator) in recheck_groups(spec).items():
                manifest = recheck_cronjob(spec, ns, job_name, targets, gpus, is_operator)
                k8s.batch.v1.CronJob(f"{name}-{job_name.removeprefix('aksgpu-gpu-')}", metadata=manifest["metadata"],
                                     spec=manifest["spec"], opts=pulumi.ResourceOptions.merge(
                                         ready, pulumi.ResourceOptions(depends_on=[priority])))


def _acceptance_resources(owner: pulumi.Resource, name: str, spec: ClusterSpec, args: GpuHealthArgs,
                          ready: pulumi.ResourceOptions) -> None:
    """The cross-node acceptance of InfiniBand pools (fabric_acceptance_objects.py), when a pool needs it."""
    ns = args.system_namespace
    targets = [*device_plugin_targets(spec), *operator_targets(spec)]
    if not acceptance.acceptance_targets(targets, spec):
        return
    queued = spec.gang_scheduling.enabled
    opts = pulumi.ResourceOptions.merge(ready, pulumi.ResourceOptions(parent=owner))
    created = declare_rbac(
        acceptance.rbac(ns),
        lambda obj: f"{name}-{obj['metadata']['name'].removeprefix('aksgpu-')}-{obj['kind'].lower()}",
        opts)
    programs = acceptance.program_config_map(spec, ns, targets, queued)
    created.append(k8s.core.v1.ConfigMap(f"{name}-acceptance-programs", metadata=programs["metadata"],
                                         data=programs["data"], opts=opts))
    for topology in acceptance.topology_config_maps(spec, ns, targets):
        created.append(k8s.core.v1.ConfigMap(f"{name}-{topology['metadata']['name'].removeprefix('aksgpu-')}",
                                             metadata=topology["metadata"], data=topology["data"], opts=opts))
    service = acceptance.headless_service(ns)
    created.append(k8s.core.v1.Service(f"{name}-acceptance-service", metadata=service["metadata"],
                                       spec=service["spec"], opts=opts))
    priority = acceptance.priority_class()
    created.append(k8s.scheduling.v1.PriorityClass(
        f"{name}-acceptance-priority", metadata=priority["metadata"], value=priority["value"],
        preemption_policy=priority["preemptionPolicy"], global_default=False, description=priority["description"],
        opts=pulumi.ResourceOptions(parent=owner, provider=args.provider)))
    # With gang scheduling, the runs' ClusterQueue and LocalQueue are GangScheduling's (after Kueue's CRDs).
    cronjob = acceptance.controller_cronjob(spec, ns, acceptance_breaker_args(spec, ns), SCRIPT_CONFIG)
    k8s.batch.v1.CronJob(f"{name}-acceptance", metadata=cronjob["metadata"], spec=cronjob["spec"],
                         opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=created)))


def _repair_resources(owner: pulumi.Resource, name: str, spec: ClusterSpec, args: GpuHealthArgs,
                      opts: pulumi.ResourceOptions) -> None:
    """The repair loop (gpu_repair.py): its rights, program, CronJob, NetworkPolicy and, where it acts,
    the admission policy over its node changes."""
    ns = args.system_namespace
    opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=owner))
    created = declare_rbac(
        gpu_repair.repair_rbac(spec, ns, args.repair_client_id),
        lambda obj: f"{name}-{obj['metadata']['name'].removeprefix('aksgpu-')}-{obj['kind'].lower()}", opts,
        chained=True)
    program = gpu_repair.program_config_map(ns)
    created.append(k8s.core.v1.ConfigMap(f"{name}-repair-program", metadata=program["metadata"],
                                         data=program["data"], opts=opts))
    if declares_policies(spec):
        policy = gpu_repair.repair_network_policy(ns)
        k8s.networking.v1.NetworkPolicy(f"{name}-repair-egress", metadata=policy["metadata"], spec=policy["spec"],
                                        opts=opts)
    if gpu_repair.acts(spec):
        created.append(declare_admission_policy(f"{name}-repair-node-policy", gpu_repair.repair_node_policy(ns),
                                                pulumi.ResourceOptions(parent=owner, provider=args.provider)))
    cronjob = gpu_repair.repair_cronjob(spec, ns, args.repair_cluster_id)
    k8s.batch.v1.CronJob(f"{name}-repair", metadata=cronjob["metadata"], spec=cronjob["spec"],
                         opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=created)))


def acceptance_breaker_args(spec: ClusterSpec, namespace: str) -> list[str]:
    """The failure bound and breaker of gpuHealth.gate, as the acceptance pass reads them."""
    gate = spec.gpu_health.gate
    breaker = gate.breaker
    return ["--namespace", namespace, "--keep-failed", str(gate.keep_failed_nodes),
            *(["--no-breaker"] if not breaker.enabled else []),
            "--breaker-share", f"{breaker.failure_share:g}", "--breaker-window-minutes", str(breaker.window_minutes),
            "--breaker-min-nodes", str(breaker.min_nodes)]
