"""The Kubernetes objects of the cross-node acceptance on InfiniBand pools (fabric_acceptance.py
runs in the cluster; this module declares what it needs), as plain manifests.

- the acceptance pass: CronJob aksgpu-fabric-acceptance on the system pool, its service account and
  rights (nodes: get, list, patch, narrowed by the gate's admission policy; pods: list, to read a
  run's result from its pods and to find idle in-service peers; Jobs: create, list, delete in
  aksgpu's namespace only; Events and the record ConfigMap as the gate);
- per InfiniBand pool a Job template (in the ConfigMap aksgpu-fabric-acceptance, with the pass's
  settings and the two programs): an Indexed Job whose pods each take a whole node (all its GPUs and
  the RDMA resource), run torchrun with aksgpu's all-reduce program and the VM size's NCCL settings
  (spec/fabric.py), tolerate the gate's taint, at a priority that never preempts work;
- a headless Service that gives index 0 a stable name (torchrun's master);
- with gang scheduling, a ClusterQueue outside the teams' cohort (it never borrows from or lends to
  a team, and never preempts) over the InfiniBand flavors and a LocalQueue in aksgpu's namespace:
  the Job carries kueue.x-k8s.io/queue-name, and Kueue admits its pods all or nothing.
"""

from __future__ import annotations

import json
from typing import Any

from aksgpu import catalog
from aksgpu.node import fabric_acceptance, fabric_decision, node_api, node_verdicts
from aksgpu.components.kubernetes.objects import (
    PoolTarget,
    driver_mode,
    labels,
    metadata,
    node_program_cronjob,
    policy_exceptions,
    pool_affinity,
    pool_tolerations,
    program_files,
    program_source,
    secured_pod,
)
from aksgpu.spec import ClusterSpec
from aksgpu.spec.fabric import FabricProfile, fabric_profile, pod_requirements
from aksgpu.spec.fabric_acceptance import AcceptanceFloor, acceptance_floor, acceptance_image, measure_settings
from aksgpu.spec.scheduling import GpuFlavor, gpu_flavors, topology_aware

ACCEPTANCE = "aksgpu-fabric-acceptance"  # CronJob, service account, ConfigMap, queues, PriorityClass
RUN = "aksgpu-fabric-acceptance-run"  # the runs' pods (name label), the headless Service
SCRIPT_DIR = "/opt/aksgpu"
# The gate's files fabric_acceptance.py imports, mounted beside it from the gate's ConfigMap.
GATE_FILES = program_files(node_api, node_verdicts)
SETTINGS_KEY = "settings.json"
MASTER_PORT = 29500
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue v0.19.2 constants: QueueLabel
# A pod-template annotation that asks Kueue for topology-aware placement anywhere in the topology
# (Kueue v0.19.2 pkg/controller/jobs/job/job_controller.go PodSets reads it from the template).
UNCONSTRAINED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
# Below the cluster autoscaler's expendable cutoff (as the re-checks): a waiting run never triggers
# a scale-up, and with preemptionPolicy Never it never preempts a pod.
PRIORITY = catalog.limit("autoscalerExpendablePriorityCutoff") - 10
SHM_GIB = 8
RUN_EXCEPTIONS = {
    "k8s-non-root": "The acceptance run's image (NVIDIA's PyTorch container) runs as root, as Azure's own AKS "
                    "NCCL test does; it holds no Kubernetes credentials.",
    "k8s-capabilities": "IPC_LOCK: RDMA pins the buffers it registers (Azure/aks-rdma-infiniband pod examples).",
    "k8s-read-only-root-fs": "torchrun and NCCL write to the container's filesystem (caches, /tmp).",
}


def acceptance_targets(targets: list[PoolTarget], spec: ClusterSpec) -> list[PoolTarget]:
    """The GPU agent pools whose new nodes wait for the cross-node acceptance: InfiniBand sizes with
    a fabric profile and a published floor, the gate and the acceptance on."""
    health = spec.gpu_health
    if not (spec.in_cluster.enabled and health.gate.enabled and health.acceptance.enabled):
        return []
    return [target for target in targets if target.pool.size and target.pool.size.infiniband
            and fabric_profile(target.pool.vm_size) is not None and acceptance_floor(target.pool.vm_size) is not None]


def _physical_gpus(target: PoolTarget) -> int:
    size = target.pool.size
    return (size.gpus if size else 0) or 8


def job_template(spec: ClusterSpec, namespace: str, target: PoolTarget, queued: bool) -> dict[str, Any]:
    """The Job of one pool's acceptance runs, without its name and nodes (fabric_acceptance.job_manifest
    adds them): each pod takes a whole node and runs one torchrun node of the all-reduce.

    Indexed completion mode sets each pod's hostname to ${jobName}-${completionIndex}, and a headless
    Service in the Job's namespace named as the template's subdomain gives those names DNS records
    (kubernetes.io docs, tasks/job/job-with-pod-to-pod-communication); the control plane sets
    JOB_COMPLETION_INDEX in each pod (tasks/job/indexed-parallel-processing-static): torchrun's
    --node-rank, and index 0's name its master address."""
    profile = fabric_profile(target.pool.vm_size)
    floor = acceptance_floor(target.pool.vm_size)
    assert profile is not None and floor is not None
    gpus = _physical_gpus(target)
    measure = measure_settings()
    acceptance = spec.gpu_health.acceptance
    run = (f'exec torchrun --nnodes="$AKSGPU_ACCEPTANCE_NODES" --nproc-per-node={gpus} '
           f'--node-rank="$JOB_COMPLETION_INDEX" --master-addr="$AKSGPU_ACCEPTANCE_MASTER" '
           f"--master-port={MASTER_PORT} {SCRIPT_DIR}/fabric_allreduce.py --bytes {floor.message_bytes} "
           f"--iterations {measure['iterations']} --warmup {measure['warmup']} "
           f"--timeout-seconds {acceptance.run_timeout_minutes * 60}")
    env: list[dict[str, Any]] = [{"name": name, "value": value}
                                 for name, value in sorted({**profile.nccl_env, **floor.nccl_env}.items())]
    env += [{"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "AKSGPU_RESULT_FILE", "value": "/dev/termination-log"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    # What every pod on an InfiniBand node needs (fabric.yaml `pod`: IPC_LOCK, a memory /dev/shm).
    needs = pod_requirements()
    mounts = [{"name": "shm", "mountPath": needs.shm_mount_path},
              {"name": "program", "mountPath": SCRIPT_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": needs.shm_medium, "sizeLimit": f"{SHM_GIB}Gi"}},
        {"name": "program", "configMap": {"name": ACCEPTANCE, "items": [
            {"key": "fabric_allreduce.py", "path": "fabric_allreduce.py"}]}},
    ]
    if profile.topology_file:
        mounts.append({"name": "nccl-topology", "mountPath": needs.topology_mount_path, "readOnly": True})
        volumes.append({"name": "nccl-topology", "configMap": {"name": topology_config_map(profile)}})
    limits = {"nvidia.com/gpu": str(gpus), profile.rdma_resource: str(profile.rdma_per_node),
              "memory": f"{4 * gpus + SHM_GIB}Gi"}
    # On GPU Operator pools (driver None) a GPU pod runs under the operator's runtime class, as the
    # gate's check and the re-checks do there.
    runtime = {"runtimeClassName": "nvidia"} if driver_mode(target.pool) == "None" else {}
    pod_labels = labels(RUN)
    job_labels = {**labels(RUN), **({KUEUE_QUEUE_LABEL: ACCEPTANCE} if queued else {})}
    # Kueue v0.19.2 admits a Job without a topology request onto a topology-aware flavor only when
    # every flavor of the ClusterQueue is one (pkg/scheduler/flavorassigner/tas_flavorassigner.go: an
    # implied request needs cq.IsTASOnly(); otherwise "Flavor ... supports only
    # TopologyAwareScheduling"). The acceptance queue holds every acceptance pool's flavor, and with
    # gangScheduling.topology auto only the fixed-size pools' are topology-aware: an explicit
    # unconstrained request lets a run onto its pool's flavor in a mixed queue too. The pods' own
    # hostname affinity and tolerations still choose the nodes (tas_flavor_snapshot.go).
    aware = queued and any(topology_aware(spec, flavor) for flavor in gpu_flavors(spec)
                           if flavor.infiniband_pool == target.name)
    pod_annotations = {UNCONSTRAINED_TOPOLOGY_ANNOTATION: "true"} if aware else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"namespace": namespace, "labels": job_labels,
                     "annotations": policy_exceptions(RUN_EXCEPTIONS)},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 2, "completions": 2,  # the pairing's node count (job_manifest)
            "backoffLimit": 0,
            "activeDeadlineSeconds": acceptance.run_timeout_minutes * 60,
            "ttlSecondsAfterFinished": 3600,
            # Kueue unsuspends it on admission (its webhook suspends a queued Job anyway).
            **({"suspend": True} if queued else {}),
            "template": {"metadata": {"labels": pod_labels,
                                      **({"annotations": pod_annotations} if pod_annotations else {})},
                         "spec": secured_pod({
                "restartPolicy": "Never",
                "subdomain": RUN,
                "priorityClassName": ACCEPTANCE,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "affinity": pool_affinity([target]),
                "tolerations": pool_tolerations([target], gate=True),
                "terminationGracePeriodSeconds": 30,
                **runtime,
                "containers": [{
                    "name": "allreduce",
                    "image": acceptance_image(),
                    "command": ["sh", "-c", run],
                    "env": env,
                    "resources": {"requests": {"cpu": str(gpus), "memory": f"{4 * gpus}Gi", **{
                        k: v for k, v in limits.items() if k != "memory"}}, "limits": limits},
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "capabilities": {"add": list(needs.capabilities), "drop": ["ALL"]}},
                    # The result line is the termination message; if the program dies, the log's tail.
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            })},
        },
    }


def topology_config_map(profile: FabricProfile) -> str:
    """aksgpu's copy of the size's NCCL topology file in its own namespace (fabric.py's ConfigMaps are
    in the team namespaces)."""
    return f"aksgpu-acceptance-topology-{profile.short_name}"


def topology_config_maps(spec: ClusterSpec, namespace: str, targets: list[PoolTarget]) -> list[dict[str, Any]]:
    from aksgpu.spec.fabric import TOPOLOGY_KEY

    found: dict[str, dict[str, Any]] = {}
    for target in acceptance_targets(targets, spec):
        profile = fabric_profile(target.pool.vm_size)
        if profile is None or not profile.topology_file:
            continue
        found[topology_config_map(profile)] = {"metadata": metadata(topology_config_map(profile), namespace),
                                               "data": {TOPOLOGY_KEY: profile.topology_xml() or ""}}
    return list(found.values())


def settings(spec: ClusterSpec, namespace: str, targets: list[PoolTarget], queued: bool) -> dict[str, Any]:
    """What the acceptance pass reads (fabric_acceptance.load_settings)."""
    accepted = acceptance_targets(targets, spec)
    floors: dict[str, AcceptanceFloor] = {}
    for target in accepted:
        floor = acceptance_floor(target.pool.vm_size)
        if floor is not None:
            floors[target.pool.vm_size] = floor
    acceptance = spec.gpu_health.acceptance
    return {"pools": {target.name: target.pool.vm_size for target in accepted},
            "floors": {size: floor.as_settings() for size, floor in sorted(floors.items())},
            "templates": {target.name: job_template(spec, namespace, target, queued) for target in accepted},
            "runTimeoutMinutes": acceptance.run_timeout_minutes, "holdMinutes": acceptance.hold_minutes}


def program_config_map(spec: ClusterSpec, namespace: str, targets: list[PoolTarget], queued: bool) -> dict[str, Any]:
    from aksgpu.node import fabric_allreduce

    return {"metadata": metadata(ACCEPTANCE, namespace), "data": {
        **program_files(fabric_acceptance, fabric_decision),
        "fabric_allreduce.py": program_source(fabric_allreduce),
        SETTINGS_KEY: json.dumps(settings(spec, namespace, targets, queued), sort_keys=True, indent=1)}}


def headless_service(namespace: str) -> dict[str, Any]:
    """Index 0 of each run as <job>-0.<this service>: torchrun's master address. Not-ready pods are
    published: the workers look it up before index 0 is ready."""
    return {"metadata": metadata(RUN, namespace), "spec": {
        "clusterIP": "None", "publishNotReadyAddresses": True,
        "selector": {"app.kubernetes.io/name": RUN},
        "ports": [{"name": "torchrun", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}]}}


def priority_class() -> dict[str, Any]:
    return {"metadata": metadata(ACCEPTANCE), "value": PRIORITY, "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "aksgpu cross-node acceptance runs: wait for idle nodes, never preempt, "
                           "never trigger a scale-up"}


def acceptance_flavors(spec: ClusterSpec, targets: list[PoolTarget]) -> list[GpuFlavor]:
    names = {target.name for target in acceptance_targets(targets, spec)}
    return [flavor for flavor in gpu_flavors(spec) if flavor.infiniband_pool in names]


def cluster_queue(spec: ClusterSpec, namespace: str, targets: list[PoolTarget]) -> dict[str, Any] | None:
    """The acceptance's own ClusterQueue: outside the teams' cohort, so it neither borrows nor lends,
    and without preemption (Kueue's default: never). Its quota is the InfiniBand pools' full size:
    Kueue's quota is bookkeeping; the nodes a run lands on are held ones or idle ones."""
    flavors = acceptance_flavors(spec, targets)
    if not flavors:
        return None
    # The RDMA resource is left out: Kueue's configuration excludes its prefix from quota on clusters
    # with InfiniBand pools (gang_scheduling.kueue_configuration, excludeResourcePrefixes), as for the
    # teams' queues; every other resource a run requests is covered (Kueue refuses undeclared ones).
    covered = ["cpu", "memory", "nvidia.com/gpu"]

    def quota(flavor: GpuFlavor) -> list[dict[str, str]]:
        capacity = flavor.capacity()
        amounts = {"cpu": str(int(capacity["cpu"])), "memory": f"{int(capacity['memory'] // 2**30)}Gi",
                   "nvidia.com/gpu": str(int(capacity["nvidia.com/gpu"]))}
        return [{"name": resource, "nominalQuota": amounts[resource]} for resource in covered]

    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": metadata(ACCEPTANCE),
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "queueingStrategy": "BestEffortFIFO",
                     "resourceGroups": [{"coveredResources": covered, "flavors": [
                         {"name": flavor.name, "resources": quota(flavor)} for flavor in flavors]}]}}


def local_queue(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": metadata(ACCEPTANCE, namespace),
            "spec": {"clusterQueue": ACCEPTANCE}}


def rbac(namespace: str) -> list[dict[str, Any]]:
    """The pass's rights, each for a step it takes: nodes get/list/patch (decide, taint, label: the
    gate's admission policy narrows the patch as for the gate), pods list (a run's result from its
    pods' status; which in-service nodes hold no GPUs), Jobs create/list/delete in aksgpu's namespace
    only, Events about nodes (in "default") and the record ConfigMap by name."""
    subject = [{"kind": "ServiceAccount", "name": ACCEPTANCE, "namespace": namespace}]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io"}
    events = f"{ACCEPTANCE}-events"
    return [
        {"kind": "ServiceAccount", "metadata": metadata(ACCEPTANCE, namespace), "automountServiceAccountToken": False},
        {"kind": "ClusterRole", "metadata": metadata(ACCEPTANCE), "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        {"kind": "ClusterRoleBinding", "metadata": metadata(ACCEPTANCE),
         "roleRef": {**role_ref, "kind": "ClusterRole", "name": ACCEPTANCE}, "subjects": subject},
        {"kind": "Role", "metadata": metadata(ACCEPTANCE, namespace), "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "list", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
             "resourceNames": [node_verdicts.RECORD_CONFIGMAP]}]},
        {"kind": "RoleBinding", "metadata": metadata(ACCEPTANCE, namespace),
         "roleRef": {**role_ref, "kind": "Role", "name": ACCEPTANCE}, "subjects": subject},
        {"kind": "Role", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
         "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]},
        {"kind": "RoleBinding", "metadata": metadata(events, node_verdicts.NODE_EVENT_NAMESPACE),
         "roleRef": {**role_ref, "kind": "Role", "name": events}, "subjects": subject},
    ]


def controller_cronjob(spec: ClusterSpec, namespace: str, breaker_args: list[str],
                       script_config: str) -> dict[str, Any]:
    """The acceptance pass, on the system pool: the gate's node_api.py and node_verdicts.py (from the
    gate's ConfigMap) and fabric_acceptance.py and fabric_decision.py with its settings (from this
    ConfigMap) side by side in one folder."""
    programs = {"name": "programs", "projected": {"sources": [
        {"configMap": {"name": script_config, "items": [{"key": key, "path": key} for key in GATE_FILES]}},
        {"configMap": {"name": ACCEPTANCE, "items": [
            *({"key": key, "path": key} for key in ("fabric_acceptance.py", "fabric_decision.py")),
            {"key": SETTINGS_KEY, "path": SETTINGS_KEY}]}}]}}
    return node_program_cronjob(
        ACCEPTANCE, namespace, container="acceptance", image=spec.gpu_health.gate.helper_image,
        command=["python3", f"{SCRIPT_DIR}/fabric_acceptance.py", "--settings", f"{SCRIPT_DIR}/{SETTINGS_KEY}",
                 *breaker_args],
        env=[{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        programs=programs, program_dir=SCRIPT_DIR, schedule=spec.gpu_health.acceptance.schedule,
        starting_deadline_seconds=120, active_deadline_seconds=150)
