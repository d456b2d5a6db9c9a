"""gpuHealth.repair: the closed loop after the gate (drain, then reimage or delete the VMSS
instance of a failed GPU node; drain ahead of Azure Scheduled Events), and its rules.
The decisions are aksgpu/node/repair_decision.py's; docs/guides/repair.md gives their sources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from aksgpu.spec.base import Issue, SpecModel

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

# Azure Scheduled Events' types (https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events,
# api-version 2020-07-01, checked 2026-11-27).
EventType = Literal["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]
DEFAULT_DRAIN_EVENTS: list[EventType] = ["Reboot", "Redeploy", "Preempt", "Terminate"]


class RepairBreaker(SpecModel):
    """When the repair loop stops: failures that look systemic (a broken node image, driver or check) are not fixed by reimaging nodes one by one. Modelled on NVIDIA NVSentinel's fault-quarantine circuit breaker (default: at most 50% of nodes within 5 minutes)."""

    pool_percent: int = Field(default=50, ge=1, le=100)
    """Share (1-100 %) of a pool's nodes failed within windowMinutes above which no failed node of that pool is repaired."""
    cluster_percent: int = Field(default=30, ge=1, le=100)
    """Share (1-100 %) of all GPU nodes of the repaired pools failed within windowMinutes above which no failed node is repaired."""
    window_minutes: int = Field(default=60, ge=5, le=1440)
    """Minutes (5-1440) of failures the breaker counts (by the time the gate failed each node)."""
    min_failures: int = Field(default=3, ge=1, le=100)
    """Failures (1-100) within the window before the breaker can open: one bad GPU in a small pool is not a trend."""


class Repair(SpecModel):
    """Closed-loop repair of GPU nodes the gate failed: after the diagnosis window, drain (PodDisruptionBudgets respected), then reimage the node's VMSS instance, or delete it when a reimage did not help; a bounded share of a pool at once, stopped by a circuit breaker; Azure Scheduled Events drain nodes ahead of time."""

    enabled: bool = False
    """Run the repair loop (the aksgpu-gpu-repair CronJob on the system pool, every 5 minutes). Off by default; on, it starts in mode dry-run."""
    mode: Literal["dry-run", "act"] = "dry-run"
    """dry-run: the loop only prints what it would do (its Job's log), with read-only rights. act: it cordons, evicts and reimages or deletes through Azure Resource Manager with its own managed identity (Entra Workload ID; needs access.workloadIdentity), given two custom roles of exactly what it calls: the VMSS instance reimage on the node resource group, and AKS's agentPools/deleteMachines on the cluster (a node is deleted through AKS, never the scale set directly)."""
    diagnosis_window_minutes: int = Field(default=60, ge=0, le=10080)
    """Minutes (0-10080) a failed node stays as the gate left it (cordoned, labelled, its GPUs and logs there to look at) before it is repaired."""
    max_unavailable_percent: int = Field(default=10, ge=1, le=100)
    """Share (1-100 %) of a pool's nodes that may be under repair at once; at least one node."""
    reimage_attempts: int = Field(default=1, ge=0, le=5)
    """Reimages (0-5) a failed node gets before a new failure deletes its VMSS instance instead (0: delete at once)."""
    breaker: RepairBreaker = RepairBreaker()
    """The circuit breaker that stops the loop when failures look systemic."""
    drain_on_events: list[EventType] = Field(default_factory=lambda: list(DEFAULT_DRAIN_EVENTS))
    """Azure Scheduled Events that drain a node ahead of time (seen through AKS node-problem-detector's VMEventScheduled condition). Freeze (a pause of a few seconds, memory kept) is left out by default."""


def check_repair(spec: ClusterSpec) -> Iterator[Issue]:
    health = spec.gpu_health
    repair = health.repair
    if not repair.enabled:
        return
    if repair.mode == "act" and not (spec.access.workload_identity and spec.access.oidc_issuer):
        yield Issue("gpuHealth.repair.mode", "act", "the repair loop signs in to Azure with its own managed identity "
                    "through Entra Workload ID, which is off for this cluster",
                    "set access.workloadIdentity: true and access.oidcIssuer: true, or mode: dry-run")
    if repair.mode == "act":
        yield Issue("gpuHealth.repair.mode", "act", "the program defines two custom roles and assigns them to the "
                    "repair loop's identity on the node resource group and the cluster, which needs Microsoft."
                    "Authorization/roleDefinitions/write and roleAssignments/write there: the deploy identity of "
                    "`aksgpu ci oidc` has neither for a custom role (docs/guides/repair.md, 'Deploying mode act')", "run `pulumi up` for this change as an Owner or User Access Administrator of the "
                    "node resource group's subscription, or keep mode: dry-run", "warning")
    if not health.gate.enabled:
        yield Issue("gpuHealth.repair.enabled", True, "the repair loop repairs the nodes the gate failed, and the "
                    "gate is off: only Azure Scheduled Events drain nodes", "set gpuHealth.gate.enabled: true",
                    "warning")
    if repair.diagnosis_window_minutes > health.gate.keep_failed_hours * 60:
        yield Issue("gpuHealth.repair.diagnosisWindowMinutes", repair.diagnosis_window_minutes,
                    f"the gate keeps a failed node from the autoscaler's scale-down for keepFailedHours "
                    f"({health.gate.keep_failed_hours} h) only, so the autoscaler may delete it before the repair's "
                    "window ends", "keep diagnosisWindowMinutes within gpuHealth.gate.keepFailedHours", "warning")
