"""GPU health: passive (DCGM metrics, scraped, with alert rules) and active (a check that gates
every new GPU node, and re-checks of idle ones)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec.base import Issue, SpecModel, checked
from aksgpu.spec.gpu_repair import Repair, check_repair
from aksgpu.spec.in_cluster import Version, pinned, pinned_image
from aksgpu.spec.resource_ids import check_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

# A container image reference: [registry/]repository[:tag][@digest], no spaces.
IMAGE = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$")
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# The five fields of a CronJob schedule: (lowest, highest, names) (Kubernetes CronJob docs).
CRON_FIELDS = (
    (0, 59, ()), (0, 23, ()), (1, 31, ()),
    (1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    (0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def _cron_value(text: str, lowest: int, highest: int, names: tuple[str, ...]) -> int | None:
    if text.lower() in names:
        return names.index(text.lower()) + lowest
    return int(text) if text.isdigit() and lowest <= int(text) <= highest else None


def valid_cron(schedule: str) -> bool:
    """Whether `schedule` is a cron schedule a CronJob accepts: five fields of *, values, ranges,
    steps and lists (names for months and weekdays), or one of the @ macros."""
    if schedule.strip() in CRON_MACROS:
        return True
    fields = schedule.split()
    if len(fields) != 5:
        return False
    for text, (lowest, highest, names) in zip(fields, CRON_FIELDS, strict=True):
        for item in text.split(","):
            body, _, step = item.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                return False
            if body == "*":
                continue
            start, dash, end = body.partition("-")
            first = _cron_value(start, lowest, highest, names)
            last = _cron_value(end, lowest, highest, names) if dash else first
            if first is None or last is None or first > last:
                return False
    return True


Image = Annotated[
    str,
    checked(IMAGE.fullmatch, "must be a container image reference: registry/repository:tag or @sha256:digest",
            'write it like "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"'),
]
Schedule = Annotated[
    str,
    checked(valid_cron, "must be a cron schedule of five fields (minute 0-59, hour 0-23, day 1-31, month 1-12, "
            "weekday 0-7) or an @ macro", 'write it like "17 */6 * * *" (every 6 hours)'),
]

# DCGM diagnostics level 2 (memory and PCIe tests, about two minutes), with nv-hostengine
# started first and the JSON report where the contract says. A real check until aksgpu's own
# checker program replaces it. Mapped onto the contract: the host engine not starting is 2 (the
# check could not run); `dcgmi diag` exiting non-zero (a test failed) is 1.
DEFAULT_CHECK_COMMAND = [
    "sh", "-c",
    'nv-hostengine >/dev/null || exit 2; dcgmi diag --run 2 --json > "$AKSGPU_REPORT" || exit 1',
]


class Metrics(SpecModel):
    """DCGM exporter on every GPU node, with a curated metric list, and who scrapes it."""

    enabled: bool = True
    """Run the DCGM exporter on every GPU node (aksgpu's DaemonSet on driver Install pools, the GPU Operator's on driver None pools), exporting the metrics of aksgpu/catalog/dcgm_metrics.csv: the defaults plus ECC, XID counts, retired pages, NVLink errors and throttling."""
    interval_seconds: int = Field(default=30, ge=1, le=300)
    """How often, in seconds (1-300), the exporter reads the GPUs and Prometheus scrapes it."""
    scraper: Literal["managedPrometheus", "bundled", "none"] | None = None
    """Who scrapes the exporters: managedPrometheus (Azure Monitor managed Prometheus; needs monitoring.managedPrometheus), bundled (a Prometheus server aksgpu installs, chart prometheus-community/prometheus; needs a pool that runs ordinary pods) or none. None: managedPrometheus when monitoring.managedPrometheus is on, otherwise none."""
    exporter_version: Version = pinned("dcgmExporter")
    """Image tag of nvcr.io/nvidia/k8s/dcgm-exporter for aksgpu's DaemonSet and the GPU Operator's exporter."""


class Alerts(SpecModel):
    """Alert rules for the GPU conditions that should take a node out (aksgpu/catalog/gpu_alerts.yaml)."""

    enabled: bool = True
    """Declare the alert rules where the metrics go: Azure Monitor Prometheus rule groups with managedPrometheus, rules in the bundled Prometheus with bundled. Nothing without a scraper."""
    action_group_ids: list[str] = Field(default_factory=list)
    """Resource IDs of Azure Monitor action groups notified when a rule fires (managedPrometheus only). Empty: alerts show in Azure Monitor without notifications."""


class Breaker(SpecModel):
    """When the gate stops failing a pool's new nodes: a share of them failing together points at the
    check's image, the driver or the node image, not at the GPUs, and failing them would only churn VMs."""

    enabled: bool = True
    """Hold instead of fail once failures look systemic: the node keeps the gate's taint (value "held"), is kept from scale-down, gets a Warning Event and the GpuGateBreakerOpen alert fires. A held node is checked again when the gate's DaemonSet rolls (a fixed image) or its gate pod is deleted."""
    failure_share: float = Field(default=0.5, gt=0, le=1)
    """Share (0-1] of a pool's gate verdicts within windowMinutes that are failures, above which the breaker opens."""
    window_minutes: int = Field(default=120, ge=10, le=1440)
    """Minutes (10-1440) of gate verdicts the breaker looks at, per pool."""
    min_nodes: int = Field(default=3, ge=1, le=100)
    """Verdicts (1-100) a pool needs within the window before the breaker can open: one bad GPU is not a trend."""


class Passive(SpecModel):
    """What the passive signals do besides alerting."""

    cordon: bool = True
    """Cordon a GPU node when its DCGM exporter reports a condition the alert rules call critical (a critical Xid, uncorrectable ECC, a row-remap failure or pending remap), or AKS's node-problem-detector raises a GPU condition on it, through the gate's verdict step: the same label, Event, record and kept-node bound as a failed check. Running pods stay; the breaker's share applies per pool and run."""


class Gate(SpecModel):
    """The check every new GPU node passes before it takes work (the node's life: tainted, checked, admitted)."""

    enabled: bool = True
    """Gate new GPU nodes: a DaemonSet taints each new GPU node with startup-taint.cluster-autoscaler.kubernetes.io/aksgpu-gpu-check, runs the check once, then removes the taint (pass) or cordons the node and labels why (fail)."""
    image: Image = pinned_image("dcgm")
    """Container image of the check. It needs /bin/sh and timeout (coreutils); GPUs are visible to it without requesting nvidia.com/gpu (NVIDIA_VISIBLE_DEVICES=all). Default: NVIDIA DCGM, whose dcgmi diag runs the default command."""
    command: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECK_COMMAND), min_length=1)
    """Command of the check: exit 0 = the node passes; exit 1 = it fails a check; any other code = the check could not run (treated as a failure). It may write a JSON report to $AKSGPU_REPORT; a top-level "failedCheck" string there names the failed check in the node's label. Default: DCGM diagnostics level 2 (memory and PCIe, about two minutes). aksgpu's own check (aksgpu/node/gpu_check, with its Dockerfile): ["python", "-m", "aksgpu.node.gpu_check"] in the image you build from it."""
    timeout_seconds: int = Field(default=600, ge=60, le=7200)
    """Seconds (60-7200) the check may run before it counts as failed (exit code 124). The gate's watchdog fails a node still pending this long plus its way to the check (node start, on GPU Operator pools the driver, the check image's pull: aksgpu/catalog/deploy_durations.yaml) plus 10 minutes."""
    keep_failed_nodes: int = Field(default=2, ge=0, le=100)
    """Failed nodes per pool (0-100) kept for diagnosis: cordoned, labelled, and annotated with the cluster autoscaler's scale-down-disabled so it does not delete them. Past this bound (the newest are kept), or after keepFailedHours, the watchdog hands a failed node to the autoscaler, which drains and deletes it when its pool is above minCount; its record (Event, log line, the aksgpu-gpu-health-record ConfigMap) stays."""
    keep_failed_hours: int = Field(default=24, ge=1, le=720)
    """Hours (1-720) a failed node is kept for diagnosis before it is handed to the autoscaler."""
    breaker: Breaker = Breaker()
    """The circuit breaker: when too many of a pool's new nodes fail, hold them instead of failing them."""
    helper_image: Image = pinned_image("python")
    """Image that runs aksgpu's own gate steps (node_gate.py: taint, verdict, watchdog) with python3. Default: Azure Linux's Python image from Microsoft's registry (no Docker Hub pull limits); point it at your registry's mirror if nodes cannot reach mcr.microsoft.com."""


class Recheck(SpecModel):
    """Periodic re-checks of idle GPU nodes that passed the gate (OpenAI's "active tests" CronJob)."""

    enabled: bool = True
    """Re-run the check on idle GPU nodes on a schedule: a CronJob per GPU node shape (GPUs per node and driver mode) whose pods each take a whole node's GPUs, at a priority so low that they never preempt work or trigger a scale-up."""
    schedule: Schedule = "17 */6 * * *"
    """Cron schedule (UTC) of the re-checks; default every 6 hours at minute 17."""
    nodes_per_pool: int = Field(default=1, ge=1, le=100)
    """Idle nodes each run re-checks per pool (1-100; at most 100 per CronJob); a run that finds fewer idle nodes checks those it finds."""


class Acceptance(SpecModel):
    """Cross-node acceptance on InfiniBand pools: new nodes that pass the gate's check take work only once an NCCL all-reduce across them reaches their VM size's floor."""

    enabled: bool = True
    """Hold each new node of an InfiniBand pool after its check (label aksgpu.io/gpu-health=accepting, the gate's taint with value accepting) until an NCCL all-reduce between it and a peer reaches Azure's published floor for the VM size (aksgpu/catalog/fabric_acceptance.yaml); a node that falls short with a known-good peer or with two peers is failed like a failed check. Needs gate.enabled."""
    run_timeout_minutes: int = Field(default=20, ge=5, le=240)
    """Minutes (5-240) one acceptance run may take once its pods may start (image pull, NCCL set-up, the measurement); a run past it says nothing about the nodes and is run again with another peer."""
    hold_minutes: int = Field(default=120, ge=15, le=1440)
    """Minutes (15-1440) a node waits for a decision. A node no peer was free for (a lone new node on a busy pool), or whose one failed pairing could not be confirmed with a second peer, then takes work with a Warning Event (GpuFabricUnaccepted) and a record entry: nodes are failed on evidence only."""
    schedule: Schedule = "*/3 * * * *"
    """Cron schedule (UTC) of the acceptance pass (aksgpu-fabric-acceptance CronJob): collect finished runs, decide, start new ones."""


class GpuHealth(SpecModel):
    """Passive and active GPU health."""

    metrics: Metrics = Metrics()
    """DCGM metrics: the exporter and its scraper."""
    alerts: Alerts = Alerts()
    """Alert rules on the DCGM metrics, each with its threshold and reason."""
    gate: Gate = Gate()
    """The check that admits each new GPU node."""
    recheck: Recheck = Recheck()
    """Scheduled re-checks of idle GPU nodes."""
    passive: Passive = Passive()
    """What critical passive signals (DCGM metrics, node-problem-detector conditions) do to a node."""
    acceptance: Acceptance = Acceptance()
    """Cross-node NCCL acceptance of new nodes on InfiniBand pools."""
    repair: Repair = Repair()
    """Closed-loop repair of the nodes the gate failed, and drains ahead of Azure Scheduled Events."""

    def effective_scraper(self, managed_prometheus: bool) -> Literal["managedPrometheus", "bundled", "none"]:
        if not self.metrics.enabled:
            return "none"
        if self.metrics.scraper is not None:
            return self.metrics.scraper
        return "managedPrometheus" if managed_prometheus else "none"


def check_gpu_health(spec: ClusterSpec) -> Iterator[Issue]:
    health = spec.gpu_health
    if not spec.in_cluster.enabled or not any(pool.kind == "gpu" for pool in spec.node_pools):
        return
    scraper = health.effective_scraper(spec.monitoring.managed_prometheus)
    if health.metrics.scraper == "managedPrometheus" and not spec.monitoring.managed_prometheus:
        yield Issue("gpuHealth.metrics.scraper", "managedPrometheus", "managed Prometheus is off for this cluster",
                    "set monitoring.managedPrometheus: true, or scraper: bundled or none")
    if scraper == "bundled" and not _has_pool_for_ordinary_pods(spec):
        yield Issue("gpuHealth.metrics.scraper", "bundled",
                    "the bundled Prometheus needs a pool that runs ordinary pods (a cpu pool, or a system pool "
                    "with onlyCriticalAddons: false)", "add a cpu pool, or use scraper: managedPrometheus")
    if health.metrics.enabled and scraper == "none" and health.metrics.scraper is None:
        yield Issue("gpuHealth.metrics.scraper", None, "the GPU metrics are exported but nothing collects them, so "
                    "no alert fires on a failing GPU", "set monitoring.managedPrometheus: true, or scraper: bundled "
                    "(or scraper: none to accept it)", "warning")
    for index, group in enumerate(health.alerts.action_group_ids):
        yield from check_id(f"gpuHealth.alerts.actionGroupIds[{index}]", group, "Microsoft.Insights/actionGroups")
    if health.alerts.action_group_ids and scraper != "managedPrometheus":
        yield Issue("gpuHealth.alerts.actionGroupIds", list(health.alerts.action_group_ids),
                    "action groups are notified by Azure Monitor rule groups, which need scraper managedPrometheus",
                    "remove them, or use managed Prometheus")
    # The whole way from a new node's Node object to the verdict, against the autoscaler's startup
    # window (spec/gpu_startup.py; figures in data/deploy_durations.yaml gpuNodeStartup).
    from aksgpu.spec import gpu_startup

    window = catalog.limit("clusterAutoscalerMaxNodeStartupMinutes")
    gated = {id(pool) for pool in gpu_startup.gated_pools(spec)}
    late = [(index, pool) for index, pool in enumerate(spec.node_pools)
            if id(pool) in gated and gpu_startup.verdict_seconds(spec, pool) > window * 60]
    if late:
        _, pool = max(late, key=lambda item: gpu_startup.verdict_seconds(spec, item[1]))
        minutes = gpu_startup.verdict_seconds(spec, pool) / 60
        names = ", ".join(f"nodePools[{i}] ({p.name})" for i, p in late)
        allowed = window * 60 - max(gpu_startup.pool_startup_seconds(p) for _, p in late)
        fixes = [f"keep the gate's check to timeoutSeconds {allowed} or less"] if allowed >= 60 else []
        fixes.append("run longer burns in the re-checks")
        if any(p.gpu_settings and p.gpu_settings.driver == "None" for _, p in late):
            fixes.append("use gpu.driver Install, whose driver AKS installs before the node joins")
        fix = ", ".join(fixes[:-1]) + f", or {fixes[-1]}" if len(fixes) > 1 else fixes[0]
        yield Issue("gpuHealth.gate.timeoutSeconds", health.gate.timeout_seconds,
                    f"a new node of {names} may take up to {minutes:.0f} minutes from joining the cluster to the "
                    f"gate's verdict ({pool.name}, in minutes: {gpu_startup.startup_timeline(spec, pool)}), and the "
                    f"cluster autoscaler counts a node as starting for {window} minutes only: after that it counts "
                    "as unready (aksgpu raises okTotalUnreadyCount and maxNodeProvisionMinutes unless you set them, "
                    "so the autoscaler keeps scaling)", fix, "warning")
    if health.gate.enabled and list(health.gate.command) == DEFAULT_CHECK_COMMAND:
        for index, pool in enumerate(spec.node_pools):
            if pool.kind == "gpu" and pool.gpu_settings and pool.gpu_settings.mig_profile:
                yield Issue(f"nodePools[{index}].gpu.migProfile", pool.gpu_settings.mig_profile,
                            "the default check is DCGM diagnostics, which NVIDIA does not support on GPUs in MIG "
                            "mode, so it may fail every node of this pool", "set gpuHealth.gate.command to a "
                            "check that runs on MIG instances, or gpuHealth.gate.enabled: false", "warning")
    yield from _check_acceptance(spec)
    yield from check_repair(spec)
    if not health.gate.enabled:
        yield Issue("gpuHealth.gate.enabled", False, "new GPU nodes take work before anything checked their GPUs; "
                    "one bad GPU slows or fails every job that lands on it", "set gpuHealth.gate.enabled: true",
                    "warning")
    elif not spec.monitoring.container_insights:
        yield Issue("monitoring.containerInsights", False,
                    "the gate's verdicts are kept as container log lines, which only Container Insights keeps after "
                    "the node and its pods are gone; without it a deleted node leaves only its entry in the "
                    "aksgpu-gpu-health-record ConfigMap (the newest 500) and Events (an hour)",
                    "set monitoring.containerInsights: true, or collect the aksgpu-system namespace's logs yourself",
                    "warning")


def _has_pool_for_ordinary_pods(spec: ClusterSpec) -> bool:
    if not spec.system_pool.only_critical_addons:
        return True
    return any(pool.kind == "cpu" and not pool.taints and pool.team is None for pool in spec.node_pools)


def _check_acceptance(spec: ClusterSpec) -> Iterator[Issue]:
    """InfiniBand pools whose new nodes cannot be accepted across nodes, said once per pool."""
    from aksgpu.spec.fabric_acceptance import acceptance_floor

    health = spec.gpu_health
    if not health.acceptance.enabled:
        return
    for index, pool in enumerate(spec.node_pools):
        if pool.kind != "gpu" or not (pool.size and pool.size.infiniband):
            continue
        if not health.gate.enabled:
            yield Issue("gpuHealth.acceptance.enabled", True, f"the cross-node acceptance of {pool.name} "
                        "({pool.vm_size}) follows the gate's check, and the gate is off", "set gpuHealth.gate."
                        "enabled: true, or gpuHealth.acceptance.enabled: false", "warning")
            return
        if acceptance_floor(pool.vm_size) is None:
            yield Issue(f"nodePools[{index}].vmSize", pool.vm_size, "Azure publishes no NCCL all-reduce floor for "
                        "this InfiniBand size (aksgpu/catalog/fabric_acceptance.yaml), so its new nodes take "
                        "work after the local check without a cross-node acceptance",
                        "run your own multi-node NCCL test on new nodes of this pool", "warning")
