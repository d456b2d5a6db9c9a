"""Turning a Plan into what people read (a tree, a pool table, the deploy-time estimate) and what
tools read (JSON).

The JSON document (formatVersion 1) is described in the README under "Plan document".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aksgpu.plan.planner import PLAN_FORMAT_VERSION, Plan, PlannedResource
from aksgpu import catalog
from aksgpu.spec import Issue
from aksgpu.plan import deploy_time

CLUSTER_TYPE = "azure-native:containerservice:ManagedCluster"
POOL_TYPE = "azure-native:containerservice:AgentPool"
SNAPSHOT_TYPE = "azure-native:containerservice:Snapshot"
NVIDIA_DRIVER_TYPE = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"  # a driver pin (kubernetes/gpu_software.py)
PROMOTION_ROLE_LABEL = "aksgpu.io/promotion-role"  # spec/promotion.py ROLE_LABEL
# Resources whose name is unique across all of Azure (catalog/azure_names.yaml, scope global):
# Pulumi type -> (what to call it, the input holding its Azure name).
GLOBAL_NAMES = {
    "azure-native:containerregistry:Registry": ("registry", "registryName"),
    "azure-native:keyvault:Vault": ("key vault", "vaultName"),
}


def pool_rows(plan: Plan) -> list[dict[str, Any]]:
    """Key facts of every node pool, read from the planned inputs (what Azure would receive)."""
    rows = []
    for cluster in plan.by_type(CLUSTER_TYPE):
        for profile in cluster.inputs.get("agentPoolProfiles", []):
            rows.append(_pool_row(profile, profile["name"]))
    states = promotion_states(plan)
    for pool in plan.by_type(POOL_TYPE):
        rows.append(_pool_row(pool.inputs, pool.inputs["agentPoolName"]))
        if states:
            rows[-1]["promotion"] = states.get(pool.urn, "-")
    return rows


def promotion_states(plan: Plan) -> dict[str, str]:
    """Pool URN -> its promotion state, where the plan has a canary or a pin (spec/promotion.py):
    "canary", "pinned to <snapshot>" (its creationData: a declared Snapshot it depends on, or an
    existing snapshot's ID), "following" (a GPU pool on AKS's node images), each with ", driver <v>"
    where an NVIDIADriver pins the pool's driver. Empty without either."""
    snapshots = {r.urn: str(r.inputs.get("resourceName")) for r in plan.by_type(SNAPSHOT_TYPE)}
    states: dict[str, str] = {}
    for pool in plan.by_type(POOL_TYPE):
        source = (pool.inputs.get("creationData") or {}).get("sourceResourceId")
        if (pool.inputs.get("nodeLabels") or {}).get(PROMOTION_ROLE_LABEL) == "canary":
            states[pool.urn] = "canary"
        elif source:
            declared = [snapshots[urn] for urn in pool.dependencies if urn in snapshots]
            states[pool.urn] = f"pinned to {declared[0] if declared else str(source).rsplit('/', 1)[-1]}"
    drivers = {((r.inputs.get("spec") or {}).get("nodeSelector") or {}).get(AGENT_POOL_LABEL):
               (r.inputs.get("spec") or {}).get("version") for r in plan.by_type(NVIDIA_DRIVER_TYPE)}
    if not states and not drivers:
        return {}
    for pool in plan.by_type(POOL_TYPE):
        if pool.urn not in states and "gpuProfile" in pool.inputs:
            states[pool.urn] = "following"
        driver = drivers.get(pool.inputs.get("agentPoolName"))
        if driver and pool.urn in states:
            states[pool.urn] += f", driver {driver}"
    return states


def _pool_row(props: dict[str, Any], name: str) -> dict[str, Any]:
    size = catalog.vm_size(props["vmSize"])
    autoscale = props.get("enableAutoScaling", False)
    min_nodes = props.get("minCount") if autoscale else props.get("count", 0)
    max_nodes = props.get("maxCount") if autoscale else props.get("count", 0)
    return {
        "name": name,
        "mode": props.get("mode", "User"),
        "vmSize": props["vmSize"],
        "gpusPerNode": size.gpus if size else None,
        "gpuModel": size.gpu_model if size else None,
        "zones": props.get("availabilityZones", []),
        "minNodes": min_nodes,
        "maxNodes": max_nodes,
        "autoscale": autoscale,
        "spot": props.get("scaleSetPriority") == "Spot",
        "taints": props.get("nodeTaints", []),
    }


AGENT_POOL_LABEL = catalog.limit("aksNode")["agentPoolLabel"]  # what the in-cluster objects select on
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"


def _affinity_pools(pod_spec: dict[str, Any]) -> list[str]:
    """Agent pools a pod's required node affinity allows (kubernetes.azure.com/agentpool In ...)."""
    required = (pod_spec.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    pools: list[str] = []
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == AGENT_POOL_LABEL and expression.get("operator") == "In":
                pools += list(expression.get("values") or [])
    return pools


def gpu_software_by_pool(plan: Plan) -> dict[str, list[str]]:
    """Agent pool -> what advertises nvidia.com/gpu on its nodes, as the plan declares it: a device
    plugin DaemonSet's node affinity, or the GPU Operator's node feature discovery worker's."""
    found: dict[str, list[str]] = {}
    for daemonset in plan.by_type("kubernetes:apps/v1:DaemonSet"):
        pod = ((daemonset.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
        if any(DEVICE_PLUGIN_IMAGE in str(c.get("image", "")) for c in pod.get("containers") or []):
            for pool in _affinity_pools(pod.get("affinity") or {}):
                found.setdefault(pool, []).append("NVIDIA device plugin")
    for release in plan.by_type("kubernetes:helm.sh/v3:Release"):
        values = release.inputs.get("values") or {}
        if release.inputs.get("chart") == "gpu-operator" and (values.get("devicePlugin") or {}).get("enabled", True):
            worker = (values.get("node-feature-discovery") or {}).get("worker") or {}
            for pool in _affinity_pools(worker.get("affinity") or {}):
                found.setdefault(pool, []).append("GPU Operator")
    return found


def summary(plan: Plan) -> dict[str, Any]:
    pools = pool_rows(plan)
    software = gpu_software_by_pool(plan)
    for pool in pools:
        pool["gpuSoftware"] = software.get(pool["name"], [])
    custom = [r for r in plan.resources if r.custom]
    return {
        "resourceCount": len(custom),
        "componentCount": len(plan.resources) - len(custom),
        "byType": dict(sorted(Counter(r.type for r in custom).items())),
        "pools": pools,
        "maxNodes": sum(p["maxNodes"] for p in pools),
        "maxGpus": sum(p["maxNodes"] * (p["gpusPerNode"] or 0) for p in pools),
        "gpuCountsComplete": all(p["gpusPerNode"] is not None for p in pools),
    }


def plan_document(plan: Plan, warnings: list[Issue], estimate: deploy_time.DeployTime | None = None
                  ) -> dict[str, Any]:
    """The stable JSON document of `aksgpu plan --json` (`estimate`: the plan's deploy time, when its
    review (plan/review.py) has it)."""
    return {
        "formatVersion": PLAN_FORMAT_VERSION,
        "project": plan.project,
        "stack": plan.stack,
        "stackFile": plan.stack_file,
        "offline": True,
        "warnings": [_issue_json(issue) for issue in warnings],
        "summary": summary(plan),
        "deployTime": deploy_time.document(estimate or deploy_time.estimate(plan)),
        "resources": [_resource_json(resource) for resource in plan.resources],
        "outputs": plan.outputs,
    }


def _issue_json(issue: Issue) -> dict[str, Any]:
    return {"path": issue.path, "value": issue.value, "rule": issue.rule, "fix": issue.fix,
            "severity": issue.severity}


def _resource_json(resource: PlannedResource) -> dict[str, Any]:
    return {
        "type": resource.type,
        "name": resource.name,
        "urn": resource.urn,
        "parent": resource.parent,
        "custom": resource.custom,
        "dependencies": resource.dependencies,
        "options": resource.options,
        "inputs": resource.inputs,
        "provider": resource.provider,
    }


def render_text(plan: Plan, warnings: list[Issue], estimate: deploy_time.DeployTime | None = None) -> str:
    """The human-readable plan: resource tree, counts by type, pools, deploy time, warnings, outputs."""
    facts = summary(plan)
    lines = [
        f"Plan for stack {plan.stack} ({plan.stack_file}), made offline: nothing was sent to Azure.",
        "",
        f"{facts['resourceCount']} resources to create, in {facts['componentCount']} components:",
    ]
    lines += _tree(plan)
    lines += ["", "By type:"]
    lines += [f"  {count:>4}  {type_}" for type_, count in facts["byType"].items()]
    lines += ["", "Node pools:"]
    lines += _pool_table(facts["pools"])
    gpus = f"{facts['maxGpus']} GPUs" + ("" if facts["gpuCountsComplete"] else " (sizes not in the table not counted)")
    lines += [f"  At full scale: {facts['maxNodes']} nodes, {gpus}."]
    lines += system_pool_lines(plan)
    lines += global_name_lines(plan)
    lines += ["", *deploy_time.text_lines(deploy_time.document(estimate or deploy_time.estimate(plan)))]
    if warnings:
        lines += ["", f"Warnings ({len(warnings)}):"]
        lines += [f"  - {issue}" for issue in warnings]
    lines += ["", "Outputs:"]
    lines += [f"  {name}: {value}" for name, value in plan.outputs.items()]
    return "\n".join(lines)


def global_names_of(plan: Plan) -> list[str]:
    """"<label> <name>" of each name this plan asks Azure for that must be free across all of Azure."""
    return [f"{label} {resource.inputs[field]}" for pulumi_type, (label, field) in GLOBAL_NAMES.items()
            for resource in plan.by_type(pulumi_type) if isinstance(resource.inputs.get(field), str)]


def global_name_lines(plan: Plan) -> list[str]:
    """The names this plan asks Azure for that must be free across all of Azure, not only here."""
    found = global_names_of(plan)
    if not found:
        return []
    return ["", f"Global names (unique across Azure): {', '.join(found)}. Another subscription or tenant "
            "may hold one; a name taken elsewhere fails `aksgpu up`: set registry.name or "
            "security.kms.keyVaultName (a fleet's registry: fleet.registry.name)."]


def system_pool_lines(plan: Plan) -> list[str]:
    """The system pool is inline in the ManagedCluster, whose agentPoolProfiles AKS reads at create
    only (components/cluster.py ignores later changes): say that edits after the first up are lost."""
    clusters = [r for r in plan.resources if r.type == "azure-native:containerservice:ManagedCluster"
                and "agentPoolProfiles" in r.options["ignoreChanges"]]
    if not clusters:
        return []
    pool = (clusters[0].inputs.get("agentPoolProfiles") or [{}])[0].get("name", "system")
    return [f"  System pool {pool}: inside the cluster resource, read by AKS at create only. Edits to systemPool "
            "after the first `aksgpu up` are not applied (aksgpu ignores agentPoolProfiles); to change it, add a "
            "new system pool (`az aks nodepool add --mode System`), move the system workloads, delete the old one."]


def _tree(plan: Plan) -> list[str]:
    children: dict[str | None, list[PlannedResource]] = {}
    urns = {r.urn for r in plan.resources}
    for resource in plan.resources:
        children.setdefault(resource.parent if resource.parent in urns else None, []).append(resource)
    lines: list[str] = []

    def visit(parent: str | None, prefix: str) -> None:
        items = children.get(parent, [])
        for index, resource in enumerate(items):
            last = index == len(items) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            lines.append(f"  {prefix}{branch}{_label(resource)}")
            visit(resource.urn, prefix + ("" if parent is None else ("   " if last else "│  ")))

    visit(None, "")
    return lines


def _label(resource: PlannedResource) -> str:
    short_type = resource.type.rsplit(":", 1)[-1]
    flags = []
    if resource.options["protect"]:
        flags.append("protected")
    if resource.options["deleteBeforeReplace"]:
        flags.append("replaced on immutable changes")
    if resource.options["ignoreChanges"]:
        flags.append("ignores " + ", ".join(resource.options["ignoreChanges"]))
    return f"{short_type} {resource.name}" + (f"  [{'; '.join(flags)}]" if flags else "")


def _pool_table(pools: list[dict[str, Any]]) -> list[str]:
    promotion = any("promotion" in p for p in pools)
    header = ["pool", "mode", "vm size", "gpus/node", "zones", "nodes", "priority", "gpu software",
              *(["promotion"] if promotion else [])]
    rows = [[
        p["name"],
        p["mode"],
        p["vmSize"],
        "?" if p["gpusPerNode"] is None else str(p["gpusPerNode"]),
        ",".join(p["zones"]) or "-",
        f"{p['minNodes']}-{p['maxNodes']}" if p["autoscale"] else str(p["maxNodes"]),
        "spot" if p["spot"] else "regular",
        ", ".join(p.get("gpuSoftware") or []) or ("none" if p["gpusPerNode"] else "-"),
        *([p.get("promotion", "-")] if promotion else []),
    ] for p in pools]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]
