"""Tenancy that cannot be bypassed: a team's pods get GPUs only through requests, use only the
priorities they are granted, share pools no team owns within quotas that add up to the pools, and
may submit the job kinds Kueue manages.

The GPU checks run aksgpu's admission policy (cel-python) against a model of the chain that decides
what a container sees (tests/oracles/gpu_visibility.py: kubelet, containerd, the NVIDIA runtime, as
read upstream), so they test the outcome, not the policy's text."""

from __future__ import annotations

import copy
import random
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from aksgpu import catalog
from aksgpu.components.kubernetes.gang_scheduling import (
    BATCH_USER_ROLE,
    COHORT,
    KUEUE_RELEASE,
    cluster_queues,
    team_claims,
    team_queue_binding,
)
from aksgpu.components.kubernetes.team_access import team_priority_quota
from aksgpu.components.kubernetes.team_admission import gpu_exposure_policy, toleration_policy
from aksgpu.spec import SpecError, parse_cluster_spec, team_gpu_quota
from aksgpu.spec.base import quantity
from aksgpu.spec.scheduling import gpu_flavors
from tests.helpers import REPO, base_spec, edit, find_object, plan_spec
from tests.oracles.cel import denials
from tests.oracles.gpu_visibility import Node, visible_gpus
from tests.oracles.scheduling import expression_matches

DATA = REPO / "tests" / "data"
TOOLKIT = DATA / "nvidia-container-toolkit"
VISION = {"metadata": {"name": "vision", "labels": {"aksgpu.io/team": "vision"}}}
CREATE = {"operation": "CREATE", "userInfo": {"username": "alice"}}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
OWN_TEAM = {"key": "aksgpu.io/team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
# The nodes a team pod may land on: AKS-driver pools (the NVIDIA runtime is containerd's default) and
# GPU Operator pools, as shipped and with the settings an operator might turn on.
NODES = {
    "install": Node("install"),
    "install, volume mounts accepted": Node("install", accept_volume_mounts=True),
    "operator": Node("operator"),
    "operator, NRI plugin": Node("operator", nri_plugin=True),
    "operator, env refused when unprivileged": Node("operator", accept_envvar_unprivileged=False),
}
IMAGES = {"plain": {}, "NGC (NVIDIA_VISIBLE_DEVICES=all)": {"NVIDIA_VISIBLE_DEVICES": "all"},
          "legacy CUDA (CUDA_VERSION only)": {"CUDA_VERSION": "12.4.1"}, "two GPUs": {"NVIDIA_VISIBLE_DEVICES": "0,1"}}
CONFIG_MAPS = {"cfg": {"NVIDIA_VISIBLE_DEVICES": "all", "LR": "0.1"}, "app": {"LR": "0.1"},
               "devices": {"VISIBLE_DEVICES": "all"}}


def pod(*containers: dict[str, Any], tolerations: list[dict[str, str]] | None = None,
        **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    manifest = {"metadata": {"name": "p", "namespace": "vision"},
                "spec": {"containers": list(containers),
                         "tolerations": [GPU_TOLERATION, OWN_TEAM] if tolerations is None else tolerations, **spec}}
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest


def container(name: str = "main", gpus: int | None = None, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "image": "nvcr.io/nvidia/pytorch:25.01-py3", **fields}
    if gpus is not None:
        body["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return body


def refused(manifest: dict[str, Any], request: dict[str, Any] = CREATE, old: dict[str, Any] | None = None) -> list[str]:
    policy, _ = gpu_exposure_policy()
    return denials(policy, obj=manifest, old=old, request=request, namespace=VISION)


def excess(manifest: dict[str, Any]) -> dict[str, set[str]]:
    """Per (node, image, container): GPUs the container would use that it was not allocated."""
    found = {}
    for node_name, node in NODES.items():
        for image_name, image_env in IMAGES.items():
            for kind in ("containers", "initContainers", "ephemeralContainers"):
                for each in manifest["spec"].get(kind) or []:
                    outcome = visible_gpus(manifest, each["name"], node, image_env=image_env, config_maps=CONFIG_MAPS)
                    if outcome.excess:
                        found[f"{node_name} / {image_name} / {each['name']}"] = outcome.excess
    return found


# --- the upstream names the policy relies on ---------------------------------------------------


def test_the_names_the_policy_checks_are_the_runtimes_own() -> None:
    table = catalog.load("gpu_visibility")
    envvars = (TOOLKIT / "envvars.go").read_text()
    for name in table["deviceEnvVars"]:
        assert re.search(rf'EnvVarNvidia\w+\s*=\s*"{name}"', envvars), name
    cuda_image = (TOOLKIT / "cuda_image.go").read_text()
    assert f'DeviceListAsVolumeMountsRoot = "{table["volumeMountDeviceRoot"]}"' in cuda_image
    assert 'requested["void"]' in cuda_image, "void selects no device"
    assert re.search(r'envvar == "" \|\| envvar == "void"', (TOOLKIT / "devices.go").read_text())
    assert 'capSysAdmin = "CAP_SYS_ADMIN"' in (TOOLKIT / "privileged.go").read_text()
    assert "SYS_ADMIN" in table["privilegedCapabilities"]
    assert "acceptEnvvarUnprivileged: true" in (TOOLKIT / "builder.go").read_text(), \
        "unprivileged containers' device variables are honoured by default: admission has to refuse them"
    operator_values = yaml.safe_load((DATA / "gpu-operator" / "values.yaml").read_text())
    classes = set()
    for path in sorted((DATA / "gpu-operator" / "assets" / "pre-requisites").glob("*runtime_class*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        classes.add(operator_values["operator"]["runtimeClass"] if name == "FILLED_BY_OPERATOR" else name)
    assert classes == set(table["nvidiaRuntimeClasses"])


# --- GPUs only through requests ----------------------------------------------------------------


def test_the_old_policy_let_a_pod_use_every_gpu_of_the_node() -> None:
    """A pod that tolerates the GPU taint and its own team's, requests no GPU and sets
    NVIDIA_VISIBLE_DEVICES=all: the toleration policy admits it, and on an AKS-driver node it gets all
    eight GPUs (NVIDIA/k8s-device-plugin#87). The GPU policy refuses it."""
    thief = pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    toleration, _ = toleration_policy()
    assert denials(toleration, obj=thief, request=CREATE, namespace=VISION) == []
    assert visible_gpus(thief, "main", NODES["install"]).excess == set(NODES["install"].gpus)
    assert refused(thief)


HOSTILE = {
    "env all, no request": (pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
                            "may not set NVIDIA_VISIBLE_DEVICES"),
    "env all beside a request of one": (
        pod(container(gpus=1, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        "may not set NVIDIA_VISIBLE_DEVICES"),
    "void, then all (the last one wins)": (
        pod(container(env=[VOID, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        "may not set NVIDIA_VISIBLE_DEVICES"),
    "env from a ConfigMap key": (
        pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "NVIDIA_VISIBLE_DEVICES"}}}])),
        "may not set NVIDIA_VISIBLE_DEVICES"),
    "an NGC image, nothing set": (pod(container()), "must set env NVIDIA_VISIBLE_DEVICES=void"),
    "a request of 0": (pod(container(gpus=0)), "must set env NVIDIA_VISIBLE_DEVICES=void"),
    "an init container from an NGC image": (
        pod(container(gpus=1), initContainers=[container("init")]), "must set env NVIDIA_VISIBLE_DEVICES=void"),
    "envFrom a ConfigMap beside a request": (
        pod(container(gpus=1, envFrom=[{"configMapRef": {"name": "cfg"}}])), "envFrom only with a prefix"),
    "envFrom with a prefix that completes the name": (
        pod(container(gpus=1, envFrom=[{"configMapRef": {"name": "devices"}, "prefix": "NVIDIA_"}])),
        "envFrom only with a prefix"),
    "privileged": (pod(container(env=[VOID], securityContext={"privileged": True})), "may not be privileged"),
    "the operator's nvidia runtime class": (
        pod(container(gpus=1), runtimeClassName="nvidia"), "may not use the NVIDIA runtime classes"),
    "the operator's legacy runtime class": (
        pod(container(gpus=1), runtimeClassName="nvidia-legacy"), "may not use the NVIDIA runtime classes"),
    "a CDI annotation for the NRI plugin": (
        pod(container(env=[VOID]), annotations={"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}),
        "may not carry CDI device annotations"),
    "a device list as a volume mount": (
        pod(container(env=[VOID],
                      volumeMounts=[{"name": "null", "mountPath": "/var/run/./nvidia-container-devices/all"}]),
            volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}]),
        "may not mount anything under /var/run/nvidia-container-devices"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_way_to_gpus_it_did_not_request_is_refused(name: str) -> None:
    manifest, message = HOSTILE[name]
    assert excess(manifest), "the path is real: some node and image would give the pod GPUs it did not request"
    found = refused(manifest)
    assert any(message in denial for denial in found), found


@pytest.mark.parametrize("capability", ["SYS_ADMIN", "sys_admin", "ALL"])
def test_sys_admin_is_refused_as_privileged(capability: str) -> None:
    """The NVIDIA runtime counts CAP_SYS_ADMIN in the bounding set as privileged (privileged.go): it
    then honours device variables whatever accept-nvidia-visible-devices-envvar-when-unprivileged
    says, and NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES, which reconfigure MIG for every
    tenant of the GPU (cmd/nvidia-container-runtime-hook/container_config.go). containerd upper-cases
    added capabilities and "ALL" adds them all (internal/cri/opts/spec_opts.go WithCapabilities)."""
    manifest = pod(container(gpus=1, securityContext={"capabilities": {"add": [capability]}}))
    assert any("may not be privileged or add SYS_ADMIN" in denial for denial in refused(manifest))


def test_the_cdi_annotation_containerd_ignores_is_refused_too() -> None:
    """containerd's CRI reads cdi.k8s.io/ only from container annotations, which kubelet fills from the
    device plugin; refused anyway, so a runtime that passes pod annotations through opens nothing."""
    manifest = pod(container(env=[VOID]), annotations={"cdi.k8s.io/gpus": "nvidia.com/gpu=all"})
    assert not excess(manifest)
    assert any("CDI device annotations" in denial for denial in refused(manifest))


WELL_BEHAVED = {
    "a GPU job": pod(container(gpus=8)),
    "a GPU job with a CPU sidecar and an init container": pod(
        container(gpus=1, envFrom=[{"configMapRef": {"name": "app"}, "prefix": "APP_"}]),
        container("sidecar", env=[VOID], envFrom=[{"configMapRef": {"name": "cfg"}}]),
        initContainers=[container("init", env=[VOID])]),
    "a CPU pod on a GPU node": pod(container(env=[VOID, {"name": "LR", "value": "0.1"}])),
    "InfiniBand: IPC_LOCK": pod(container(gpus=8, securityContext={"capabilities": {"add": ["IPC_LOCK"]}})),
}


@pytest.mark.parametrize("name", list(WELL_BEHAVED))
def test_pods_that_request_their_gpus_are_admitted_and_see_only_those(name: str) -> None:
    manifest = WELL_BEHAVED[name]
    assert refused(manifest) == []
    assert excess(manifest) == {}


def test_pods_that_cannot_reach_gpu_nodes_are_left_alone() -> None:
    cpu_only = pod(container(), tolerations=[])
    assert refused(cpu_only) == []
    assert refused(pod(container(), tolerations=[OWN_TEAM])) == []


def test_updates_are_checked_when_they_bring_a_pod_to_gpu_nodes_only() -> None:
    update = {"operation": "UPDATE", "userInfo": {"username": "system:serviceaccount:kueue-system:kueue"}}
    gated = pod(container(), tolerations=[OWN_TEAM])
    admitted = copy.deepcopy(gated)
    admitted["spec"]["tolerations"].append(GPU_TOLERATION)  # Kueue adds its flavor's tolerations
    assert refused(admitted, update, old=gated), "adding the GPU toleration is checked"
    older = pod(container())  # on a GPU node before the policy: a finalizer removal must go through
    assert refused(older, update, old=older) == []
    debug = pod(container(gpus=1))
    debug["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    ephemeral = {**update, "subResource": "ephemeralcontainers"}
    assert refused(debug, ephemeral, old=pod(container(gpus=1))), "a new ephemeral container is checked"
    debug["spec"]["ephemeralContainers"][0]["env"] = [VOID]
    assert refused(debug, ephemeral, old=pod(container(gpus=1))) == []


def _random_container(rng: random.Random, name: str, ephemeral: bool = False) -> dict[str, Any]:
    """Mostly well-behaved, with one or more of the paths above mixed in at random."""
    body: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base"}
    gpus = None if ephemeral else rng.choice([None, None, 0, 1, 8])
    if gpus is not None:
        body["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if rng.random() < 0.7:
        env = [[{"name": "LR", "value": "0.1"}], None] if gpus \
            else [[VOID], [VOID, {"name": "CUDA_VERSION", "value": "12.4"}]]
    else:
        env = [[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}],
               [VOID, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], [{"name": "CUDA_VERSION", "value": "12.4"}],
               [{"name": "NVIDIA_VISIBLE_DEVICES",
                 "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "NVIDIA_VISIBLE_DEVICES"}}}], [VOID], None]
    chosen = rng.choice(env)
    if chosen:
        body["env"] = copy.deepcopy(chosen)
    env_from = rng.choice([None, None, None, [{"configMapRef": {"name": "app"}, "prefix": "APP_"}],
                           [{"configMapRef": {"name": "cfg"}}],
                           [{"configMapRef": {"name": "devices"}, "prefix": "NVIDIA_"}],
                           [{"configMapRef": {"name": "cfg"}, "prefix": "APP_"}], [{"configMapRef": {"name": "app"}}]])
    if env_from:
        body["envFrom"] = copy.deepcopy(env_from)
    context = rng.choice([None] * 6 + [{"capabilities": {"add": ["IPC_LOCK"]}}, {"privileged": True},
                                       {"capabilities": {"add": ["SYS_ADMIN"]}}, {"capabilities": {"add": ["ALL"]}}])
    if context and not ephemeral:
        body["securityContext"] = copy.deepcopy(context)
    if rng.random() < 0.1:
        body["volumeMounts"] = [{"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]
    return body


@pytest.mark.slow
def test_every_pod_the_policy_admits_sees_only_the_gpus_it_was_allocated() -> None:
    """Seeded random pods built from every path above and the harmless variants: whatever the policy
    admits gets, on every node and from every image, no GPU it did not request."""
    rng = random.Random(20261127)
    admitted = refused_count = 0
    for index in range(200):
        containers = [_random_container(rng, f"c{n}") for n in range(rng.choice([1, 2]))]
        spec: dict[str, Any] = {"volumes": [{"name": "null", "hostPath": {"path": "/dev/null"}}]}
        if rng.random() < 0.3:
            spec["initContainers"] = [_random_container(rng, "init")]
        if rng.random() < 0.15:
            spec["ephemeralContainers"] = [_random_container(rng, "debug", ephemeral=True)]
        runtime_class = rng.choice([None] * 8 + ["nvidia", "nvidia-legacy", "nvidia-cdi"])
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
        annotations = rng.choice([None] * 8 + [{"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"}])
        if annotations:
            spec["annotations"] = annotations
        manifest = pod(*containers, **spec)
        if refused(manifest):
            refused_count += 1
            continue
        admitted += 1
        assert excess(manifest) == {}, (index, manifest)
    assert admitted >= 20 and refused_count >= 60, (admitted, refused_count)


def test_the_gpu_policy_is_bound_to_team_namespaces_and_validates() -> None:
    from tests.oracles.kubernetes import validate_object

    plan = plan_spec(edit(base_spec(), "access.teams", [{"name": "vision"}]))
    policy = find_object(plan, "ValidatingAdmissionPolicy", "aksgpu-team-gpus")
    binding = find_object(plan, "ValidatingAdmissionPolicyBinding", "aksgpu-team-gpus")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "aksgpu.io/team", "operator": "Exists"}]}
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    resources = set(policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"])
    assert {"pods", "pods/ephemeralcontainers"} <= resources
    for obj in (policy, binding):
        assert validate_object(obj, "1.33") == []


# --- priorities --------------------------------------------------------------------------------


def _selector_matches(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    """A ResourceQuota scope requirement (scopeName for key) matched as a label requirement."""
    return expression_matches({"key": requirement["scopeName"], "operator": requirement["operator"],
                               "values": requirement.get("values", [])}, labels)


def _quota_admits(quota: dict[str, Any], class_name: str) -> bool:
    """pkg/quota/v1/evaluator/core/pods.go: a pod in the scope counts against `pods`; with hard pods 0
    it is refused. The Priority admission plugin has already named the default class on a pod
    that named none (plugin/pkg/admission/priority/admission.go admitPod)."""
    labels = {"PriorityClass": class_name or "aksgpu-default"}
    in_scope = all(_selector_matches(r, labels) for r in quota["spec"]["scopeSelector"]["matchExpressions"])
    return not (in_scope and quota["spec"]["hard"]["pods"] == "0")


@pytest.mark.parametrize(("granted", "class_name", "admitted"), [
    ([], "", True),
    ([], "aksgpu-default", True),
    ([], "aksgpu-gpu-job", False),
    ([], "system-node-critical", False),
    ([], "system-cluster-critical", False),
    ([], "a-class-added-later", False),
    (["aksgpu-gpu-job"], "aksgpu-gpu-job", True),
    (["aksgpu-gpu-job"], "system-node-critical", False),
])
def test_a_team_runs_pods_only_at_the_priorities_it_is_granted(granted: list[str], class_name: str,
                                                               admitted: bool) -> None:
    spec, _ = parse_cluster_spec(edit(base_spec(), "access.teams", [{"name": "vision", "priorityClasses": granted}]))
    assert _quota_admits(team_priority_quota(spec.access.teams[0]), class_name) is admitted


def test_priority_class_rules() -> None:
    two_teams = edit(base_spec(), "access.teams", [{"name": "vision", "priorityClasses": ["aksgpu-gpu-job"]},
                                                   {"name": "speech"}])
    _, warnings = parse_cluster_spec(two_teams)
    [warning] = [w for w in warnings if w.path == "access.teams[0].priorityClasses"]
    assert "preempt lower-priority pods of speech on the pools no team owns (a100)" in warning.rule
    _, quiet = parse_cluster_spec(edit(edit(two_teams, "nodePools.0.team", "vision"), "access.teams.0.quota.gpus", 4))
    assert not [w for w in quiet if w.path == "access.teams[0].priorityClasses"], "no pool is shared"
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(two_teams, "access.teams.1.priorityClasses",
                                ["aksgpu-gpu-job", "system-node-critical"]))
    assert 'access.teams[1].priorityClasses[1] = "system-node-critical"' in str(error.value)
    assert "preempt" in str(error.value) and "remove it" in str(error.value)


def test_a_soft_gpu_taint_is_refused_with_teams() -> None:
    spec = edit(edit(base_spec(), "access.teams", [{"name": "vision"}]), "nodePools.0.taints",
                ["nvidia.com/gpu=present:PreferNoSchedule"])
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert 'nodePools[0].taints[0] = "nvidia.com/gpu=present:PreferNoSchedule"' in str(error.value)


# --- Kueue: shared pools within the pool, each team within its claim -----------------------------


def _shared_spec(gpus: tuple[int, int, int] = (6, 5, 0)) -> dict[str, Any]:
    spec = edit(base_spec(), "nodePools.0", {"name": "shared", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                             "zones": ["1"], "minCount": 0, "maxCount": 8})
    spec = edit(spec, "nodePools.1", {"name": "vision", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "zones": ["1"], "minCount": 0, "maxCount": 2, "team": "vision"})
    spec = edit(spec, "gangScheduling.enabled", True)
    return edit(spec, "access.teams", [{"name": "vision", "quota": {"gpus": gpus[0] + 2, "cpu": "100"}},
                                       {"name": "speech", "quota": {"gpus": gpus[1]}},
                                       {"name": "ops", "quota": {"gpus": gpus[2]}}])


def _cohort_use(spec: Any) -> dict[str, dict[str, dict[str, tuple[Decimal, Decimal]]]]:
    """Flavor -> team -> resource -> (nominal, borrowingLimit), read from the ClusterQueue manifests."""
    use: dict[str, dict[str, dict[str, tuple[Decimal, Decimal]]]] = {}
    for team in spec.access.teams:
        for queue in cluster_queues(spec, team):
            assert queue["spec"]["cohortName"] == COHORT
            for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
                for resource in flavor["resources"]:
                    use.setdefault(flavor["name"], {}).setdefault(team.name, {})[resource["name"]] = (
                        quantity(resource["nominalQuota"]), quantity(resource["borrowingLimit"]))
    return use


@pytest.mark.parametrize("gpus", [(6, 5, 0), (8, 8, 8), (1, 2, 3), (3, 3, 2)])
def test_quotas_on_a_shared_pool_add_up_to_the_pool(gpus: tuple[int, int, int]) -> None:
    """Kueue lends unused nominal quota inside a cohort, never more than the cohort's nominal total:
    the nominal quotas on the pool no team owns add up to at most what it holds (before: each team
    got up to the whole pool), and no team's nominal plus borrowing exceeds what it claims."""
    spec, _ = parse_cluster_spec(_shared_spec(gpus))
    use = _cohort_use(spec)
    [shared] = [flavor for flavor in gpu_flavors(spec) if flavor.team is None]
    capacity = shared.capacity()
    for resource in ("nvidia.com/gpu", "cpu", "memory"):
        assert sum(nominal for nominal, _ in (t[resource] for t in use[shared.name].values())) <= capacity[resource]
    claimed = sum(team_claims(spec, team)[shared.name]["nvidia.com/gpu"] for team in spec.access.teams)
    total = sum(t["nvidia.com/gpu"][0] for t in use[shared.name].values())
    assert total == min(claimed, capacity["nvidia.com/gpu"]), "the pool is shared out, not left idle"
    for team in spec.access.teams:
        gpu_total = sum(nominal + borrow for flavor in use.values() for name, t in flavor.items() if name == team.name
                        for nominal, borrow in [t["nvidia.com/gpu"]])
        assert gpu_total <= team_gpu_quota(spec, team), "a team's queues admit no more than its ResourceQuota"
        claim = team_claims(spec, team)[shared.name]
        for resource, (nominal, borrow) in use[shared.name][team.name].items():
            assert nominal + borrow == claim[resource] and borrow >= 0


def test_the_queues_pass_the_clusterqueue_crds_own_rules() -> None:
    """The x-kubernetes-validations of the vendored ClusterQueue CRD (v0.19.2), evaluated with
    cel-python on every queue: borrowingLimit needs a cohort, flavors list every covered resource."""
    crd = yaml.safe_load((DATA / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml").read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")["schema"]["openAPIV3Schema"]
    spec, _ = parse_cluster_spec(_shared_spec())
    queues = [queue for team in spec.access.teams for queue in cluster_queues(spec, team)]
    assert queues
    for queue in queues:
        assert _crd_rule_failures(schema, queue) == [], queue["metadata"]["name"]
    no_cohort = copy.deepcopy(queues[0])
    del no_cohort["spec"]["cohortName"]
    assert _crd_rule_failures(schema, no_cohort) == ["borrowingLimit must be nil when cohort is empty"]


def _crd_rule_failures(schema: dict[str, Any], value: Any) -> list[str]:
    failures = []
    if isinstance(value, dict):
        value = {**{k: s["default"] for k, s in (schema.get("properties") or {}).items() if "default" in s}, **value}
    for rule in schema.get("x-kubernetes-validations") or []:
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
            failures.append(rule["message"])
    if isinstance(value, dict):
        for key, child in value.items():
            if key in (schema.get("properties") or {}):
                failures += _crd_rule_failures(schema["properties"][key], child)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            failures += _crd_rule_failures(schema["items"], item)
    return failures


# --- Kueue's job kinds, in both authorization modes --------------------------------------------


def _kueue_cluster_roles() -> dict[str, dict[str, Any]]:
    """The chart's ClusterRoles for a release named like aksgpu's: the Helm include lines dropped
    (labels beyond the template's own), and kueue.fullname rendered per _helpers.tpl."""
    helpers = (DATA / "kueue" / "rbac" / "_helpers.tpl").read_text()
    assert "{{- if contains $name .Release.Name }}" in helpers, "fullname is the release name when it holds the chart's"
    fullname = KUEUE_RELEASE if "kueue" in KUEUE_RELEASE else f"{KUEUE_RELEASE}-kueue"
    roles = {}
    for path in sorted((DATA / "kueue" / "rbac").glob("*.yaml")):
        text = re.sub(r"\{\{-? */\*.*?\*/ *-?\}\}", "", path.read_text(), flags=re.DOTALL)  # template comments
        text = "\n".join(line for line in text.splitlines()
                         if not line.strip().startswith("{{") or "fullname" in line)
        text = text.replace('{{ include "kueue.fullname" . }}', fullname)
        role = yaml.safe_load(text)
        roles[role["metadata"]["name"]] = role
    return roles


def _allowed(role_name: str, roles: dict[str, dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    role = roles[role_name]
    rules = list(role.get("rules") or [])
    for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors", []):
        for other in roles.values():
            if all((other["metadata"].get("labels") or {}).get(k) == v for k, v in selector["matchLabels"].items()):
                rules += other.get("rules") or []
    return any(group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] for rule in rules)


@pytest.mark.parametrize("authorization", ["kubernetes-rbac", "azure-rbac"])
def test_team_members_may_submit_kueues_job_kinds_and_see_their_workloads(authorization: str) -> None:
    spec = edit(edit(_shared_spec(), "access.authorization", authorization), "access.teams.0.groupObjectIds",
                ["22222222-2222-2222-2222-222222222222"])
    plan = plan_spec(spec)
    binding = find_object(plan, "RoleBinding", "aksgpu-vision-batch-user")
    assert binding["metadata"]["namespace"] == "vision"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "22222222-2222-2222-2222-222222222222"}]
    roles = _kueue_cluster_roles()
    assert binding["roleRef"]["name"] == BATCH_USER_ROLE in roles
    for group, resource, verb in [("kueue.x-k8s.io", "workloads", "list"), ("kueue.x-k8s.io", "localqueues", "list"),
                                  ("batch", "jobs", "create"), ("jobset.x-k8s.io", "jobsets", "create"),
                                  ("kubeflow.org", "mpijobs", "create"),
                                  ("trainer.kubeflow.org", "trainjobs", "create"),
                                  ("ray.io", "rayjobs", "create")]:
        assert _allowed(BATCH_USER_ROLE, roles, group, resource, verb), (group, resource, verb)
    assert not _allowed(BATCH_USER_ROLE, roles, "kueue.x-k8s.io", "clusterqueues", "update")
    assert not _allowed(BATCH_USER_ROLE, roles, "kueue.x-k8s.io", "workloads", "update"), "admission stays Kueue's"
    speech = parse_cluster_spec(spec)[0].access.teams[1]
    assert not speech.group_object_ids and team_queue_binding(speech) is None, "no groups, no binding"


def test_the_kueue_release_name_is_the_one_the_role_name_assumes() -> None:
    plan = plan_spec(_shared_spec())
    [release] = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith("kueue")]
    assert release.inputs["name"] == KUEUE_RELEASE
    assert BATCH_USER_ROLE == f"{release.inputs['name']}-batch-user-role"


@pytest.mark.parametrize(("folder", "source"), [
    (TOOLKIT, TOOLKIT / "SOURCE.md"),
    (DATA / "kueue" / "rbac", DATA / "kueue" / "SOURCE.md"),
    (DATA / "gpu-operator" / "assets" / "pre-requisites", DATA / "gpu-operator" / "SOURCE.md"),
])
def test_every_upstream_file_these_tests_read_has_its_source_row(folder: Path, source: Path) -> None:
    text = source.read_text()
    for path in folder.iterdir():
        if path.name != "SOURCE.md":
            assert f"{path.name}` |" in text, path
