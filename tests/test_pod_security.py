"""Pod Security on InfiniBand pools: the baseline level, plus IPC_LOCK for pods pinned to one.

The oracle for "baseline" is upstream's own: the Pod Security Admission test fixtures for the
baseline level at v1.37 (tests/data/pod-security, SOURCE.md there), every `fail` pod refused and
every `pass` pod admitted by aksgpu's policy, evaluated with cel-python. Kueue's placement is modelled
from its source (tests/oracles/kueue_placement.py), so the exception is tested on the pods Kueue
really creates and updates."""

from __future__ import annotations

import copy
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu.components.kubernetes.gang_scheduling import resource_flavor
from aksgpu.components.kubernetes.pod_security import (
    ALLOWED_CAPABILITIES,
    INFINIBAND_BASELINE_POLICY,
    infiniband_baseline_policy,
    infiniband_teams,
)
from aksgpu.components.kubernetes.team_admission import gpu_exposure_policy, toleration_policy
from aksgpu.spec import parse_cluster_spec
from aksgpu.spec.scheduling import gpu_flavors
from tests.helpers import REPO, base_spec, edit, find_object, kubernetes_manifests, shared_plan
from tests.oracles import kueue_placement
from tests.oracles.cel import denials
from tests.oracles.kubernetes import validate_object

FIXTURES = REPO / "tests" / "data" / "pod-security"
BASELINE = FIXTURES / "baseline" / "v1.37"
AGENT_POOL = "kubernetes.azure.com/agentpool"
CREATE = {"operation": "CREATE", "userInfo": {"username": "alice"}}
UPDATE = {"operation": "UPDATE",
          "userInfo": {"username": "system:serviceaccount:kueue-system:kueue-controller-manager"}}
DEBUG = {"operation": "UPDATE", "subResource": "ephemeralcontainers", "userInfo": {"username": "alice"}}
# The namespaces of two teams, each with an InfiniBand pool of its own.
VISION = {"metadata": {"name": "vision", "labels": {"aksgpu.io/team": "vision"}}}
RESEARCH = {"metadata": {"name": "research", "labels": {"aksgpu.io/team": "research"}}}
TEAMS = {"vision": ["h100v"], "research": ["h100r"]}
POLICY = infiniband_baseline_policy(TEAMS)
# The PSA check each fixture family exercises (the fixture's file name, policy/check_*.go) and the
# word of aksgpu's message that names the same check.
CHECK_OF_FIXTURE = {
    "apparmorprofile": "AppArmor", "capabilities_baseline": "capabilities", "hostnamespaces": "host namespaces",
    "hostpathvolumes": "hostPath", "hostports": "hostPort", "hostprobesandhostlifecycle": "probe or lifecycle host",
    "privileged": "privileged", "procmount": "procMount", "seccompprofile_baseline": "seccompProfile",
    "selinuxoptions": "seLinuxOptions", "sysctls": "sysctls", "windowshostprocess": "hostProcess",
}


def _fixtures(outcome: str) -> list[Path]:
    return sorted((BASELINE / outcome).glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _pinned(pod: dict[str, Any], pool: str = "h100v") -> dict[str, Any]:
    pinned = copy.deepcopy(pod)
    pinned["spec"].setdefault("nodeSelector", {})[AGENT_POOL] = pool
    return pinned


def _check_of(path: Path) -> str:
    family = path.stem.rstrip("0123456789")
    return CHECK_OF_FIXTURE[family]


# --- the upstream fixtures --------------------------------------------------------------------


def test_the_fixtures_are_upstreams_unchanged() -> None:
    """Every fixture's git blob id is the one SOURCE.md records (and so upstream's)."""
    text = (FIXTURES / "SOURCE.md").read_text()
    files = _fixtures("pass") + _fixtures("fail")
    assert len(files) == 49, "the v1.37 baseline set has 15 pass and 34 fail pods"
    for path in files:
        blob = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout
        row = f"`{path.parent.name}/{path.name}` | `{blob.strip()}` | `{hashlib.sha256(path.read_bytes()).hexdigest()}`"
        assert row in text, path


def test_every_fixture_family_is_a_check_the_policy_names() -> None:
    """A fixture family the map does not know is a baseline check added upstream: the policy must learn it."""
    for path in _fixtures("pass") + _fixtures("fail"):
        if path.stem != "base":
            assert path.stem.rstrip("0123456789") in CHECK_OF_FIXTURE, path


@pytest.mark.parametrize("path", _fixtures("fail"), ids=lambda p: p.stem)
def test_every_pod_baseline_refuses_is_refused(path: Path) -> None:
    """Refused with the check upstream refuses it for, and still refused when pinned to an InfiniBand
    pool: the exception adds IPC_LOCK and nothing else."""
    pod = _load(path)
    for candidate in (pod, _pinned(pod)):
        found = denials(POLICY, obj=candidate, request=CREATE, namespace=VISION)
        assert found, path.name
        assert any(_check_of(path) in message for message in found), (path.name, found)


@pytest.mark.parametrize("path", _fixtures("pass"), ids=lambda p: p.stem)
def test_every_pod_baseline_admits_is_admitted(path: Path) -> None:
    pod = _load(path)
    assert denials(POLICY, obj=pod, request=CREATE, namespace=VISION) == []
    assert denials(POLICY, obj=_pinned(pod), request=CREATE, namespace=VISION) == []


@pytest.mark.slow
def test_a_debug_container_that_baseline_refuses_is_refused() -> None:
    """The fixtures put their violations in the pod, its containers and init containers; PSA visits
    ephemeral containers too (policy/visitor.go visitContainers). Each fixture whose pod-level fields
    pass, with its containers added as ephemeral containers to a running pod, is refused the same way."""
    container_level = 0
    for path in _fixtures("fail"):
        pod = _load(path)
        running = copy.deepcopy(pod)
        running["spec"]["containers"] = [{"name": "app", "image": "registry.k8s.io/pause"}]
        running["spec"].pop("initContainers", None)
        if denials(POLICY, obj=running, request=CREATE, namespace=VISION):
            continue  # a pod-level violation (host namespaces, sysctls, the pod's own security context)
        container_level += 1
        debugged = copy.deepcopy(running)
        debugged["spec"]["ephemeralContainers"] = [
            {**container, "name": f"debug-{index}"}
            for index, container in enumerate(pod["spec"].get("initContainers", []) + pod["spec"]["containers"])]
        found = denials(POLICY, obj=debugged, old=running, request=DEBUG, namespace=VISION)
        assert any(_check_of(path) in message for message in found), (path.name, found)
    assert container_level >= 20, container_level


def _without_host_network(path: Path) -> dict[str, Any]:
    pod = _load(path)
    pod["spec"].pop("hostNetwork")
    return pod


def test_windows_host_process_is_refused_on_its_own() -> None:
    """Upstream's hostProcess fixtures also set hostNetwork (the API requires it for a host process
    pod), so the host namespaces check alone would refuse them; without it the hostProcess check does."""
    for path in sorted((BASELINE / "fail").glob("windowshostprocess*.yaml")):
        found = denials(POLICY, obj=_without_host_network(path), request=CREATE, namespace=VISION)
        assert found and all("hostProcess" in message for message in found), (path.name, found)


@pytest.mark.slow
def test_no_check_of_the_policy_is_dead() -> None:
    """Every validation, turned off, lets through a pod upstream refuses (or, for the pin, an unpinned
    IPC_LOCK pod): none is shadowed by another or never reached."""
    refused = [_load(path) for path in _fixtures("fail")]
    refused += [_without_host_network(path) for path in sorted((BASELINE / "fail").glob("windowshostprocess*.yaml"))]
    refused.append(_ib_pod("IPC_LOCK"))
    for index, validation in enumerate(POLICY["spec"]["validations"]):
        weakened = copy.deepcopy(POLICY)
        weakened["spec"]["validations"][index]["expression"] = "true"
        assert any(not denials(weakened, obj=pod, request=CREATE, namespace=VISION) for pod in refused), \
            validation["message"]


# --- the exception ------------------------------------------------------------------------------


def _ib_pod(*capabilities: str, where: str = "containers", **spec: Any) -> dict[str, Any]:
    container = {"name": "nccl", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "securityContext": {"capabilities": {"add": list(capabilities)}}}
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "i"}], **spec}
    body.setdefault(where, []).append(container)
    return {"metadata": {"name": "p", "namespace": "vision"}, "spec": body}


@pytest.mark.slow
def test_ipc_lock_is_admitted_on_the_teams_infiniband_pool_only() -> None:
    on_pool = _pinned(_ib_pod("IPC_LOCK"))
    assert denials(POLICY, obj=on_pool, request=CREATE, namespace=VISION) == []
    assert denials(POLICY, obj=_pinned(_ib_pod("IPC_LOCK", where="initContainers")), request=CREATE,
                   namespace=VISION) == [], "an init container may add it too"
    assert denials(POLICY, obj=_pinned(_ib_pod("IPC_LOCK", "NET_BIND_SERVICE")), request=CREATE,
                   namespace=VISION) == [], "with the baseline capabilities"
    refused = {
        "not pinned": _ib_pod("IPC_LOCK"),
        "pinned to a pool without InfiniBand": _pinned(_ib_pod("IPC_LOCK"), "a100"),
        "pinned to another team's InfiniBand pool": _pinned(_ib_pod("IPC_LOCK"), "h100r"),
        "pinned by a label that is not the pool's": {**_ib_pod("IPC_LOCK"), "spec": {
            **_ib_pod("IPC_LOCK")["spec"], "nodeSelector": {"agentpool": "h100v"}}},
    }
    for case, pod in refused.items():
        found = denials(POLICY, obj=pod, request=CREATE, namespace=VISION)
        assert found and all("IPC_LOCK is allowed only" in message for message in found), (case, found)
    assert denials(POLICY, obj=_pinned(_ib_pod("IPC_LOCK"), "h100r"), request=CREATE, namespace=RESEARCH) == [], \
        "research's own pool"


@pytest.mark.parametrize("capabilities", [
    ("IPC_LOCK", "SYS_ADMIN"), ("SYS_ADMIN",), ("IPC_LOCK", "NET_ADMIN"), ("NET_RAW",), ("IPC_LOCK", "SYS_RESOURCE"),
    ("ipc_lock",), ("CAP_IPC_LOCK",), ("ALL",), ("IPC_LOCK", "ALL"),
])
def test_nothing_else_is_added_even_on_an_infiniband_pool(capabilities: tuple[str, ...]) -> None:
    """Capabilities compare as written, as PSA does (check_capabilities_baseline.go, sets.Has): a
    spelling the runtime would also accept is refused, not waved through."""
    for where in ("containers", "initContainers"):
        found = denials(POLICY, obj=_pinned(_ib_pod(*capabilities, where=where)), request=CREATE, namespace=VISION)
        assert any("non-default capabilities" in message for message in found), (capabilities, where, found)


def test_ipc_lock_does_not_open_the_host() -> None:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        pod = _pinned(_ib_pod("IPC_LOCK", **{field: True}))
        assert any("host namespaces" in m for m in denials(POLICY, obj=pod, request=CREATE, namespace=VISION)), field
    privileged = _pinned(_ib_pod("IPC_LOCK"))
    privileged["spec"]["containers"][1]["securityContext"]["privileged"] = True
    assert any("privileged" in m for m in denials(POLICY, obj=privileged, request=CREATE, namespace=VISION))
    host_path = _pinned(_ib_pod("IPC_LOCK", volumes=[{"name": "dev", "hostPath": {"path": "/dev/infiniband"}}]))
    assert any("hostPath" in m for m in denials(POLICY, obj=host_path, request=CREATE, namespace=VISION))


def test_a_debug_container_stays_at_baseline_on_an_infiniband_pod() -> None:
    running = _pinned(_ib_pod("IPC_LOCK"))
    debug = copy.deepcopy(running)
    debug["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox",
                                             "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]
    found = denials(POLICY, obj=debug, old=running, request=DEBUG, namespace=VISION)
    assert any("non-default capabilities" in m for m in found), found
    debug["spec"]["ephemeralContainers"][0]["securityContext"] = {}
    assert denials(POLICY, obj=debug, old=running, request=DEBUG, namespace=VISION) == []


# --- Kueue's placement --------------------------------------------------------------------------


def _kueue_spec() -> Any:
    spec, _ = parse_cluster_spec(_ib_spec())
    return spec


def _ib_pool(name: str, team: str | None) -> dict[str, Any]:
    pool = {"name": name, "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
            "maxCount": 4, "gpu": {"driver": "None"}}
    return {**pool, "team": team} if team else pool


def _ib_spec(teams: list[dict[str, Any]] | None = None, shared_ib: bool = False) -> dict[str, Any]:
    spec = edit(base_spec(), "nodePools.1", _ib_pool("h100v", "vision"))
    spec = edit(spec, "nodePools.2", _ib_pool("h100r", "research"))
    if shared_ib:
        spec = edit(spec, "nodePools.3", _ib_pool("h100s", None))
    spec = edit(spec, "gangScheduling.enabled", True)
    return edit(spec, "access.teams", teams or [{"name": "vision"}, {"name": "research"},
                                                {"name": "speech", "quota": {"gpus": 4}}])


def _flavor_of(pool: str) -> dict[str, Any]:
    [flavor] = [f for f in gpu_flavors(_kueue_spec()) if f.infiniband_pool == pool]
    return resource_flavor(flavor)


def _training_pod() -> dict[str, Any]:
    """One pod of the README's gang: 8 GPUs, the RDMA resource, IPC_LOCK, no pin of its own."""
    pod = _ib_pod("IPC_LOCK")
    pod["spec"]["containers"] = [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                  "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/ib": "8"}},
                                  "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]
    return pod


def test_a_job_kueue_admits_to_an_infiniband_flavor_creates_pinned_pods() -> None:
    """Kueue merges the flavor into the Job's template before unsuspending it, so the Job controller
    CREATEs pods that carry the pool's label; every team policy admits them."""
    flavor = _flavor_of("h100v")
    assert flavor["spec"]["nodeLabels"][AGENT_POOL] == "h100v"
    pod = kueue_placement.job_pod(_training_pod()["spec"], flavor)
    assert denials(POLICY, obj=pod, request=CREATE, namespace=VISION) == []
    toleration, _ = toleration_policy()
    gpus, _ = gpu_exposure_policy()
    assert denials(toleration, obj=pod, request=CREATE, namespace=VISION) == []
    assert denials(gpus, obj=pod, request=CREATE, namespace=VISION) == []
    unpinned = kueue_placement.job_pod(_training_pod()["spec"], _flavor_of("h100r"))
    assert denials(POLICY, obj=unpinned, request=CREATE, namespace=VISION), "another team's flavor"


@pytest.mark.parametrize("topology_aware", [False, True])
def test_a_plain_pod_is_created_gated_and_pinned_when_kueue_ungates_it(topology_aware: bool) -> None:
    """The pod integration: created with Kueue's gate(s) and no pin, which is admitted (it cannot be
    scheduled); Kueue's admission patch adds the pin as it removes the gate, admitted; an update that
    removes the last gate without the pin is refused."""
    created = kueue_placement.gated_on_create(_training_pod(), topology_aware)
    assert denials(POLICY, obj=created, request=CREATE, namespace=VISION) == []
    patched = kueue_placement.admitted(created, _flavor_of("h100v"), topology_aware)
    assert denials(POLICY, obj=patched, old=created, request=UPDATE, namespace=VISION) == []
    if topology_aware:
        assert patched["spec"]["schedulingGates"] == [{"name": kueue_placement.TOPOLOGY_GATE}]
        ungated = copy.deepcopy(patched)
        del ungated["spec"]["schedulingGates"]
        ungated["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "aks-h100v-1"
        assert denials(POLICY, obj=ungated, old=patched, request=UPDATE, namespace=VISION) == []
    sneaked = copy.deepcopy(created)
    del sneaked["spec"]["schedulingGates"]
    found = denials(POLICY, obj=sneaked, old=created, request=UPDATE, namespace=VISION)
    assert found and all("IPC_LOCK is allowed only" in m for m in found), found
    to_other_pool = copy.deepcopy(sneaked)
    to_other_pool["spec"]["nodeSelector"] = {AGENT_POOL: "a100"}
    assert denials(POLICY, obj=to_other_pool, old=created, request=UPDATE, namespace=VISION)


def test_updates_that_change_nothing_baseline_sees_are_not_evaluated() -> None:
    """PSA evaluates an update only when it can change what it checks (admission.go
    isSignificantPodUpdate); a running pod's other updates (a finalizer removed, a label added) pass,
    so a pod admitted before the policy is never stuck."""
    old = _ib_pod("IPC_LOCK")  # unpinned: admitted before the policy existed
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"done": "true"}
    assert denials(POLICY, obj=new, old=old, request=UPDATE, namespace=VISION) == []


def test_a_pod_with_no_ipc_lock_needs_no_pin() -> None:
    for pod in (_ib_pod(), _ib_pod("NET_BIND_SERVICE"), _load(BASELINE / "pass" / "base.yaml")):
        assert denials(POLICY, obj=pod, request=CREATE, namespace=VISION) == []


# --- which teams, and the plan --------------------------------------------------------------------


def test_the_teams_that_may_use_an_infiniband_pool_get_the_exception() -> None:
    spec, _ = parse_cluster_spec(_ib_spec())
    assert infiniband_teams(spec) == {"vision": ["h100v"], "research": ["h100r"]}, "speech has no InfiniBand pool"
    spec, _ = parse_cluster_spec(_ib_spec(shared_ib=True))
    assert infiniband_teams(spec) == {"vision": ["h100s", "h100v"], "research": ["h100r", "h100s"],
                                      "speech": ["h100s"]}, "a pool no team owns is every team's"
    spec, _ = parse_cluster_spec(_ib_spec([{"name": "vision", "podSecurity": "restricted"},
                                           {"name": "research", "podSecurity": "privileged"}]))
    assert infiniband_teams(spec) == {}, "restricted keeps its level; privileged needs no exception"


def test_the_plan_declares_the_namespaces_policy_and_binding() -> None:
    plan = shared_plan(_ib_spec())
    namespaces = {m["metadata"]["name"]: m["metadata"]["labels"] for m in kubernetes_manifests(plan)
                  if m["kind"] == "Namespace"}
    for team in ("vision", "research"):
        labels = namespaces[team]
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
        assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert namespaces["speech"]["pod-security.kubernetes.io/enforce"] == "baseline"
    policy = find_object(plan, "ValidatingAdmissionPolicy", INFINIBAND_BASELINE_POLICY)
    binding = find_object(plan, "ValidatingAdmissionPolicyBinding", INFINIBAND_BASELINE_POLICY)
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "aksgpu.io/team", "operator": "In", "values": ["research", "vision"]}]}
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    for obj in (policy, binding):
        assert validate_object(obj, "1.33") == []
    # The planned policy is the one tested above, for this spec's teams and pools.
    pod = _pinned(_ib_pod("IPC_LOCK"), "h100v")
    assert denials(policy, obj=pod, request=CREATE, namespace=VISION) == []
    assert denials(policy, obj=_pinned(_ib_pod("IPC_LOCK"), "h100v"), request=CREATE, namespace=RESEARCH)
    # The other team policies are still there, bound to every team namespace.
    for name in ("aksgpu-team-tolerations", "aksgpu-team-gpus"):
        assert find_object(plan, "ValidatingAdmissionPolicyBinding", name)["spec"]["matchResources"] == {
            "namespaceSelector": {"matchExpressions": [{"key": "aksgpu.io/team", "operator": "Exists"}]}}


def test_a_namespace_waits_for_the_binding_that_enforces_its_baseline() -> None:
    """Between a namespace at enforce: privileged and the policy's binding nothing would enforce
    baseline: the namespace depends on the binding."""
    plan = shared_plan(_ib_spec())
    [binding] = [r for r in plan.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
                 if r.inputs["metadata"]["name"] == INFINIBAND_BASELINE_POLICY]
    namespaces = {r.inputs["metadata"]["name"]: r for r in plan.by_type("kubernetes:core/v1:Namespace")}
    assert binding.urn in namespaces["vision"].dependencies
    assert binding.urn not in namespaces["speech"].dependencies


def test_no_infiniband_pool_no_policy() -> None:
    plan = shared_plan(edit(base_spec(), "access.teams", [{"name": "vision"}]))
    assert not [m for m in kubernetes_manifests(plan) if m["metadata"]["name"] == INFINIBAND_BASELINE_POLICY]
    [namespace] = [m for m in kubernetes_manifests(plan)
                   if m["kind"] == "Namespace" and m["metadata"]["name"] == "vision"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_the_capabilities_are_psas_default_set() -> None:
    """The thirteen Docker defaults PSA allows (check_capabilities_baseline.go); IPC_LOCK is not one."""
    assert len(ALLOWED_CAPABILITIES) == 13 and "IPC_LOCK" not in ALLOWED_CAPABILITIES
    assert "NET_RAW" not in ALLOWED_CAPABILITIES and "SYS_ADMIN" not in ALLOWED_CAPABILITIES


def _readme_job_under_each_flavor(plan: Any) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """The README's Job, the pods the Job controller creates from the template Kueue merged under each
    flavor of the queue it names (prod example), and the team's namespace."""
    from tests.test_fabric import readme_gang_example

    job = next(o for o in readme_gang_example() if o["kind"] == "Job")
    team = job["metadata"]["namespace"]
    manifests = kubernetes_manifests(plan)
    [namespace] = [m for m in manifests if m["kind"] == "Namespace" and m["metadata"]["name"] == team]
    [local_queue] = [m for m in manifests if m["kind"] == "LocalQueue" and m["metadata"]["namespace"] == team
                     and m["metadata"]["name"] == job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]]
    cluster_queue = find_object(plan, "ClusterQueue", local_queue["spec"]["clusterQueue"])
    pods = []
    for group in cluster_queue["spec"]["resourceGroups"]:
        for entry in group["flavors"]:
            pod = kueue_placement.job_pod(job["spec"]["template"]["spec"],
                                          find_object(plan, "ResourceFlavor", entry["name"]))
            pod["metadata"]["namespace"] = team
            pods.append((entry["name"], pod))
    assert pods
    return job, pods, namespace


def test_the_readme_gang_job_passes_pod_security_where_kueue_places_it(example_plans: dict[str, Any]) -> None:
    """The README's 4 x 8 H100 Job (IPC_LOCK, the RDMA resource) in the prod example: under every
    flavor of its queue, the pods pass the baseline policy and the toleration policy as the prod plan
    declares them; the same template run without Kueue (no pin) is refused."""
    plan = example_plans["prod"]
    job, pods, namespace = _readme_job_under_each_flavor(plan)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    policies = [find_object(plan, "ValidatingAdmissionPolicy", name)
                for name in (INFINIBAND_BASELINE_POLICY, "aksgpu-team-tolerations")]
    for flavor, pod in pods:
        for policy in policies:
            assert denials(policy, obj=pod, request=CREATE, namespace=namespace) == [], (flavor,
                                                                                         policy["metadata"]["name"])
    unplaced = {"metadata": {"name": "train-llm-0", "namespace": namespace["metadata"]["name"]},
                "spec": job["spec"]["template"]["spec"]}
    assert denials(policies[0], obj=unplaced, request=CREATE, namespace=namespace)


def test_the_readme_gang_job_passes_the_gpu_policy(example_plans: dict[str, Any]) -> None:
    plan = example_plans["prod"]
    _, pods, namespace = _readme_job_under_each_flavor(plan)
    policy = find_object(plan, "ValidatingAdmissionPolicy", "aksgpu-team-gpus")
    for flavor, pod in pods:
        assert denials(policy, obj=pod, request=CREATE, namespace=namespace) == [], flavor


def test_a_restricted_team_on_an_infiniband_pool_is_warned() -> None:
    _, issues = parse_cluster_spec(_ib_spec([{"name": "vision", "podSecurity": "restricted"}, {"name": "research"}]))
    [warning] = [issue for issue in issues if issue.path == "access.teams[0].podSecurity"]
    assert warning.severity == "warning" and "h100v" in warning.rule and "IPC_LOCK" in warning.rule
    assert not [issue for issue in issues if issue.path == "access.teams[1].podSecurity"]
