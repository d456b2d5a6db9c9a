"""Topology-aware gangs: the node labeller, Kueue's Topology and flavors, node replacement.

Held to references no one here wrote: Microsoft's documented IMDS response
(tests/data/imds), Kueue v0.19.2's Topology and ResourceFlavor CRDs and the Go sources of its
feature gates, its TAS node matching and its failed-node controller (tests/data/kueue), the
labeller's admission policy evaluated with cel-python, and the plan of the real program.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from aksgpu.environments.presets import preset_names
from aksgpu import catalog
from aksgpu.node import node_topology, node_verdicts
from aksgpu.components.kubernetes.gang_scheduling import (
    CLIQUE_LABEL,
    HOSTNAME_LABEL,
    INFINIBAND_TOPOLOGY,
    NVLINK_TOPOLOGY,
    TOPOLOGY_LEVELS,
    kueue_configuration,
)
from aksgpu.components.kubernetes.objects import GATE_TAINT_KEY
from aksgpu.components.kubernetes.topology import LABELLER, NODE_POLICY, labeller_targets, node_label_policy
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.scheduling import gpu_flavors, topology_aware
from tests.helpers import EXAMPLE, base_spec, edit, imported_top_levels, kubernetes_manifests, preset_spec, shared_plan
from tests.oracles.cel import denials
from tests.oracles.kubernetes import validate_object
from tests.oracles.scheduling import tolerates
from tests.test_gpu_health import merge_patch

DATA = Path(__file__).resolve().parent / "data"
KUEUE = DATA / "kueue"
NAMESPACE = "aksgpu-system"
LABELLER_USER = f"system:serviceaccount:{NAMESPACE}:{LABELLER}"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
IMDS_EXAMPLE = json.loads((DATA / "imds" / "compute-linux-example.json").read_text())
H100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "count": 4,
        "gpu": {"driver": "None"}, "team": "research"}
GB300 = {"name": "gb300", "kind": "gpu", "vmSize": "Standard_ND128isr_GB300_v6", "zones": ["1"], "count": 18,
         "osSku": "Ubuntu2404", "gpu": {"driver": "None"}, "team": "research"}


def _spec(*pools: dict[str, Any], topology: str = "auto") -> dict[str, Any]:
    spec = edit(base_spec(), "nodePools", list(pools))
    spec = edit(edit(spec, "access.teams", [{"name": "research"}]), "gangScheduling",
                {"enabled": True, "topology": topology})
    return edit(spec, "controlPlane.kubernetesVersion", "1.34")


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return kubernetes_manifests(shared_plan(_spec(H100, GB300)))


def _of(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in manifests if obj["kind"] == kind}


# --- the labeller, on Microsoft's documented IMDS response ----------------------------------------


def test_the_documented_imds_response_gives_the_vms_placement_group() -> None:
    assert node_topology.topology_labels(IMDS_EXAMPLE) == {
        node_topology.PLACEMENT_GROUP_LABEL: "f67c14ab-e92c-408c-ae2d-da15866ec79a"}
    # IMDS writes "" for what does not apply (instance-metadata-service.md): no made-up domain then.
    for group in ("", None, "x" * 64, "not a label value"):
        document = {**IMDS_EXAMPLE, "placementGroupId": group}
        with pytest.raises(node_topology.TopologyUnknown):
            node_topology.topology_labels(document)


def test_imds_is_asked_directly_with_the_metadata_header() -> None:
    seen: list[urllib.request.Request] = []

    class Response:
        def __enter__(self) -> Response:
            return self

        def __exit__(self, *args: Any) -> None:
            pass

        def read(self) -> bytes:
            return json.dumps(IMDS_EXAMPLE).encode()

    def opener(request: urllib.request.Request) -> Response:
        seen.append(request)
        return Response()

    assert node_topology.read_imds(opener)["placementGroupId"] == IMDS_EXAMPLE["placementGroupId"]
    [request] = seen
    assert request.get_header("Metadata") == "true"
    assert request.full_url.startswith("http://169.254.169.254/metadata/instance/compute?api-version=")
    assert catalog.load("topology")["imds"]["apiVersion"] in request.full_url
    assert catalog.load("topology")["imds"]["url"] == node_topology.IMDS_URL


class FakeApi(node_topology.Api):
    """One node, patched the way the API server does it: merge patch, optimistic lock, and the
    labeller's admission policy (cel-python) with the node its pod runs on in the token."""

    def __init__(self, node: dict[str, Any], pod_node: str | None) -> None:
        super().__init__("http://unused", None, None)
        self.node = node
        self.pod_node = pod_node
        self.policy = node_label_policy(NAMESPACE)[0]
        self.denied: list[list[str]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        assert name == self.node["metadata"]["name"]
        return copy.deepcopy(self.node)

    def merge_patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if patch["metadata"]["resourceVersion"] != self.node["metadata"]["resourceVersion"]:
            raise urllib.error.HTTPError("x", 409, "Conflict", None, None)  # type: ignore[arg-type]
        changed = merge_patch(self.node, patch)
        request = {"userInfo": {"username": LABELLER_USER,
                                **({"extra": {NODE_NAME_CLAIM: [self.pod_node]}} if self.pod_node else {})}}
        denied = denials(self.policy, obj=changed, old=self.node, request=request)
        if denied:
            self.denied.append(denied)
            raise urllib.error.HTTPError("x", 422, "; ".join(denied), None, None)  # type: ignore[arg-type]
        changed["metadata"]["resourceVersion"] = str(int(self.node["metadata"]["resourceVersion"]) + 1)
        self.node = changed
        return changed


def _aks_node(name: str = "aks-h100-12345678-vmss000000") -> dict[str, Any]:
    """A node as AKS registers it in an InfiniBand pool: under the gate's taint, no topology label."""
    return {"metadata": {"name": name, "resourceVersion": "7",
                         "labels": {"kubernetes.azure.com/agentpool": "h100", HOSTNAME_LABEL: name,
                                    "node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
                                    "aksgpu.io/team": "research"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                {"key": GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_labeller_labels_its_own_node_through_its_admission_policy() -> None:
    api = FakeApi(_aks_node(), pod_node="aks-h100-12345678-vmss000000")
    reads = iter([urllib.error.URLError("IMDS not up yet"), IMDS_EXAMPLE])

    def read() -> dict[str, Any]:
        found = next(reads)
        if isinstance(found, Exception):
            raise found
        return found

    slept: list[float] = []
    labels = node_topology.run(api, "aks-h100-12345678-vmss000000", read, slept.append)
    assert api.denied == [] and slept == [5]
    assert api.node["metadata"]["labels"][node_topology.PLACEMENT_GROUP_LABEL] == IMDS_EXAMPLE["placementGroupId"]
    assert set(labels) == set(node_topology.LABEL_KEYS)
    before = copy.deepcopy(api.node)
    node_topology.run(api, "aks-h100-12345678-vmss000000", lambda: IMDS_EXAMPLE, slept.append)
    assert api.node == before, "labelled once: a second run changes nothing"


def test_the_labeller_cannot_label_another_node_or_without_the_node_claim() -> None:
    for pod_node in ("aks-h100-12345678-vmss000001", None):
        api = FakeApi(_aks_node(), pod_node=pod_node)
        with pytest.raises(urllib.error.HTTPError):
            node_topology.run(api, "aks-h100-12345678-vmss000000", lambda: IMDS_EXAMPLE, lambda _: None, attempts=1)
        assert api.denied == [["the topology labeller may change only the node its pod runs on"]]
        assert node_topology.PLACEMENT_GROUP_LABEL not in api.node["metadata"]["labels"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda n: n["metadata"]["labels"].update({"aksgpu.io/gpu-health": "passed"}), "may only set its own labels"),
    (lambda n: n["metadata"]["labels"].pop("aksgpu.io/team"), "may only set its own labels"),
    (lambda n: n["metadata"]["annotations"].update({"x": "y"}), "may not change annotations"),
    (lambda n: n["spec"].update({"taints": n["spec"]["taints"][:1]}), "may not change a node's spec"),
    (lambda n: n["spec"].update({"unschedulable": True}), "may not change a node's spec"),
])
def test_the_policy_refuses_every_other_change(change: Any, message: str) -> None:
    policy = node_label_policy(NAMESPACE)[0]
    old = _aks_node()
    new = copy.deepcopy(old)
    new["metadata"]["labels"][node_topology.PLACEMENT_GROUP_LABEL] = "g1"
    request = {"userInfo": {"username": LABELLER_USER, "extra": {NODE_NAME_CLAIM: [old["metadata"]["name"]]}}}
    assert denials(policy, obj=new, old=old, request=request) == []
    change(new)
    assert any(message in denial for denial in denials(policy, obj=new, old=old, request=request))
    other = {"userInfo": {"username": "system:serviceaccount:kube-system:someone"}}
    assert denials(policy, obj=new, old=old, request=other) == [], "the policy is the labeller's alone"


def test_the_labeller_runs_on_the_host_network_on_infiniband_nodes_under_the_gate(
        manifests: list[dict[str, Any]]) -> None:
    daemonset = _of(manifests, "DaemonSet")[LABELLER]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True, "IMDS restriction blocks pods off the host network"
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expressions = {e["key"]: e for e in term["matchExpressions"]}
    assert expressions[node_topology.PLACEMENT_GROUP_LABEL]["operator"] == "DoesNotExist"
    assert set(expressions["kubernetes.azure.com/agentpool"]["values"]) == {"h100", "gb300"}
    node = _aks_node()
    assert all(tolerates(pod["tolerations"], taint) for taint in node["spec"]["taints"]), \
        "it lands on a node still under the gate, so the label is there at admission"
    assert validate_object(daemonset, "1.34") == []
    assert daemonset["metadata"]["annotations"]["policy.aksgpu.io/k8s-host-namespaces"]
    [policy] = [o for o in manifests
                if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == NODE_POLICY]
    assert validate_object(policy, "1.34") == []


def test_no_labeller_without_infiniband_pools() -> None:
    spec, _ = parse_cluster_spec(base_spec())
    assert labeller_targets(spec) == []
    assert not [o for o in kubernetes_manifests(shared_plan(base_spec())) if o["metadata"]["name"] == LABELLER]


# --- Kueue: Topology and flavors, against its CRDs and source ------------------------------------


def _crd(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((KUEUE / name).read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")["schema"]["openAPIV3Schema"]


def _rule_failures(schema: dict[str, Any], value: Any, old: Any = None) -> list[str]:
    """The CRD's x-kubernetes-validations on `value` (cel-python); rules that read oldSelf only
    apply to updates, as the API server does."""
    failures = []
    for rule in schema.get("x-kubernetes-validations") or []:
        if "oldSelf" in rule["rule"] and old is None:
            continue
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        activation = {"self": celpy.json_to_cel(value),
                      **({"oldSelf": celpy.json_to_cel(old)} if old is not None else {})}
        if not bool(program.evaluate(activation)):
            failures.append(rule["message"])
    if isinstance(value, dict):
        for key, child in value.items():
            if key in (schema.get("properties") or {}):
                failures += _rule_failures(schema["properties"][key], child,
                                           old.get(key) if isinstance(old, dict) else None)
    return failures


def test_topologies_and_flavors_pass_kueues_crds_and_their_rules(manifests: list[dict[str, Any]]) -> None:
    topologies = _of(manifests, "Topology")
    assert set(topologies) == {INFINIBAND_TOPOLOGY, NVLINK_TOPOLOGY}
    schema = _crd("kueue.x-k8s.io_topologies.yaml")
    for topology in topologies.values():
        assert validate_object(topology, "1.34") == []
        assert _rule_failures(schema, topology) == []
    wrong = copy.deepcopy(topologies[INFINIBAND_TOPOLOGY])
    wrong["spec"]["levels"].reverse()
    assert _rule_failures(schema, wrong) == ["the kubernetes.io/hostname label can only be used at the lowest level "
                                             "of topology"], "the oracle evaluates the CRD's rules"
    flavors = _of(manifests, "ResourceFlavor")
    flavor_schema = _crd("kueue.x-k8s.io_resourceflavors.yaml")
    by_pool = {f["spec"]["nodeLabels"]["kubernetes.azure.com/agentpool"]: f for f in flavors.values()}
    assert by_pool["h100"]["spec"]["topologyName"] == INFINIBAND_TOPOLOGY
    assert by_pool["gb300"]["spec"]["topologyName"] == NVLINK_TOPOLOGY
    for flavor in flavors.values():
        assert validate_object(flavor, "1.34") == [] and _rule_failures(flavor_schema, flavor) == []
    changed = copy.deepcopy(by_pool["h100"])
    changed["spec"]["tolerations"] = changed["spec"]["tolerations"][:1]
    assert _rule_failures(flavor_schema, changed, old=by_pool["h100"]) == [
        "tolerations are immutable when topologyName is set"], \
        "why a pool's taints cannot change in place (docs/guides/gpus/training.md)"


def test_levels_end_at_the_node_and_each_has_a_writer() -> None:
    """Kueue's hot swap works only when the lowest level is the node (topology_aware_scheduling.md,
    "Hot swap support"); every other level is a label someone writes: aksgpu's labeller exactly
    its keys, and GPU Feature Discovery the NVLink clique, on Grace Blackwell nodes only."""
    for name, levels in TOPOLOGY_LEVELS.items():
        assert levels[-1] == HOSTNAME_LABEL and HOSTNAME_LABEL not in levels[:-1]
        assert len(set(levels)) == len(levels)
        ours = [level for level in levels if level.startswith("aksgpu.io/")]
        assert tuple(ours) == node_topology.LABEL_KEYS, name
        assert set(levels) - set(ours) - {HOSTNAME_LABEL} == ({CLIQUE_LABEL} if name == NVLINK_TOPOLOGY else set())


def _node_matches_flavor(labels: dict[str, str], required: dict[str, str], levels: list[str]) -> bool:
    """kueue v0.19.2 pkg/util/tas/node.go NodeMatchesFlavor, as written there (checked below)."""
    return all(labels.get(k) == v for k, v in required.items()) and all(level in labels for level in levels)


def test_no_gang_lands_on_a_node_before_its_labels_exist(manifests: list[dict[str, Any]]) -> None:
    source = (KUEUE / "tas_node.go").read_text()
    assert re.search(r"for _, level := range requiredLevels \{\s*if _, ok := nodeLabels\[level\]; !ok \{\s*"
                     r"return false", source), "Kueue counts only nodes that carry every level's label"
    cache = (KUEUE / "tas_nodes_cache.go").read_text()
    assert "schedulableAndReady := !node.Spec.Unschedulable &&" in cache, "a cordoned node's capacity leaves TAS"
    flavors = {f["spec"]["nodeLabels"]["kubernetes.azure.com/agentpool"]: f
               for f in _of(manifests, "ResourceFlavor").values()}
    levels = {name: [level["nodeLabel"] for level in t["spec"]["levels"]] for name,
              t in _of(manifests, "Topology").items()}
    node = _aks_node()
    h100 = flavors["h100"]["spec"]
    assert not _node_matches_flavor(node["metadata"]["labels"], h100["nodeLabels"], levels[h100["topologyName"]])
    api = FakeApi(node, pod_node=node["metadata"]["name"])
    node_topology.run(api, node["metadata"]["name"], lambda: IMDS_EXAMPLE, lambda _: None)
    assert _node_matches_flavor(api.node["metadata"]["labels"], h100["nodeLabels"], levels[h100["topologyName"]])
    gb300 = flavors["gb300"]["spec"]
    gb_labels = {**api.node["metadata"]["labels"], "kubernetes.azure.com/agentpool": "gb300",
                 "node.kubernetes.io/instance-type": "Standard_ND128isr_GB300_v6"}
    assert not _node_matches_flavor(gb_labels, gb300["nodeLabels"], levels[gb300["topologyName"]]), \
        "a GB300 node whose GPUs report no NVLink clique takes no topology-aware gang"
    assert _node_matches_flavor({**gb_labels, CLIQUE_LABEL: "c8a9d0e1-0000-4000-8000-000000000001.32766"},
                                gb300["nodeLabels"], levels[gb300["topologyName"]])


# --- node replacement on the gate's failure -------------------------------------------------------


def _feature_gates() -> dict[str, tuple[bool, str]]:
    """Feature -> (default, pre-release) at the newest version kube_features.go lists for it."""
    source = (KUEUE / "kube_features.go").read_text()
    found = {}
    for name, body in re.findall(r"\n\t(\w+): \{\n(.*?)\n\t\},", source, flags=re.DOTALL):
        versions = re.findall(r"Default: (true|false), PreRelease: featuregate\.(\w+)", body)
        if versions:
            default, stage = versions[-1]
            found[name] = (default == "true", stage)
    return found


def test_kueue_is_configured_with_the_node_replacement_gates_as_its_source_names_them() -> None:
    spec, _ = parse_cluster_spec(_spec(H100))
    gates = kueue_configuration(spec)["featureGates"]
    known = _feature_gates()
    assert len(known) > 50, "the parser read the feature table"
    assert set(gates) == {"TopologyAwareScheduling", "TASFailedNodeReplacement", "TASFailedNodeReplacementFailFast",
                          "TASReplaceNodeOnPodTermination", "TASReplaceNodeOnNodeTaints"}
    for gate, enabled in gates.items():
        assert enabled is True and known[gate] == (True, "Beta"), gate


def _taints_after_failure() -> list[dict[str, Any]]:
    """The gate fails a running node (the watchdog's passive cordon): node_verdicts.fail_node's patch,
    then Kubernetes' node lifecycle controller, which taints every node with spec.unschedulable
    node.kubernetes.io/unschedulable:NoSchedule (kubernetes pkg/controller/nodelifecycle
    node_lifecycle_controller.go doNoScheduleTaintingPass; kubernetes.io "Taints and Tolerations",
    "Taint Nodes by Condition"; TaintNodesByCondition, GA since 1.17)."""
    node = _aks_node()
    node["spec"]["taints"] = node["spec"]["taints"][:1]  # admitted: the gate's taint gone

    class Api:
        def get_node(self, name: str) -> dict[str, Any]:
            return copy.deepcopy(node)

        def merge_patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
            node.update(merge_patch(node, patch))
            return node

    assert node_verdicts.fail_node(Api(), node["metadata"]["name"], "passive-xid", "Xid 79", {})  # type: ignore[arg-type]
    assert node["spec"]["unschedulable"] is True
    return [*node["spec"]["taints"], {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def test_the_gates_failure_is_a_taint_kueues_node_replacement_reacts_to(manifests: list[dict[str, Any]]) -> None:
    controller = (KUEUE / "node_controller.go").read_text()
    # The Update predicate reconciles on a taint change when TASReplaceNodeOnNodeTaints is on ...
    assert ("features.Enabled(features.TASReplaceNodeOnNodeTaints) && "
            "!equality.Semantic.DeepEqual(e.ObjectOld.Spec.Taints, e.ObjectNew.Spec.Taints)") in controller
    # ... and a NoSchedule or NoExecute taint the workload does not tolerate marks the node failed
    # (once its pods there stopped, with TASReplaceNodeOnPodTermination).
    assert re.search(r"func hasSchedulingTaints.*?TaintEffectNoExecute \|\| taint\.Effect == "
                     r"corev1\.TaintEffectNoSchedule", controller, flags=re.DOTALL)
    assert "if len(untolerated) > 0 {" in controller
    flavor = next(f for f in _of(manifests, "ResourceFlavor").values() if f["spec"].get("topologyName"))
    before = {(t["key"], t["effect"]) for t in _aks_node()["spec"]["taints"][:1]}
    new = [t for t in _taints_after_failure() if (t["key"], t["effect"]) not in before]
    assert new and all(t["effect"] in ("NoSchedule", "NoExecute") for t in new)
    untolerated = [t for t in new if not tolerates(flavor["spec"]["tolerations"], {"value": "", **t})]
    assert untolerated, "the flavor's tolerations (added to every admitted pod) do not cover the failure's taint"
    held = {"key": GATE_TAINT_KEY, "value": "held", "effect": "NoSchedule"}
    assert not tolerates(flavor["spec"]["tolerations"], held), "a held node is no replacement candidate either"


# --- which flavors are topology-aware, and the spec's warnings ------------------------------------


def _issues(spec: dict[str, Any]) -> list[Any]:
    return parse_cluster_spec(spec)[1]


def test_auto_makes_fixed_size_infiniband_pools_topology_aware_only() -> None:
    autoscaled = {k: v for k, v in H100.items() if k != "count"} | {
        "name": "h100b", "zones": ["2"], "minCount": 0, "maxCount": 8, "labels": {"aksgpu.io/ib-domain": "h100b"}}
    a100 = {"name": "a100", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4", "count": 2, "team": "research"}
    for mode, expected in (("auto", {"h100"}), ("on", {"h100", "h100b"}), ("off", set())):
        spec, issues = parse_cluster_spec(_spec(H100, autoscaled, a100, topology=mode))
        aware = {flavor.infiniband_pool for flavor in gpu_flavors(spec) if topology_aware(spec, flavor)}
        assert aware == expected, mode
        warned = [i for i in issues if i.path == "gangScheduling.topology"]
        assert bool(warned) == (mode == "on"), mode
    assert "ProvisioningRequest" in str(warned[0]) if warned else True


def test_an_infiniband_pool_over_one_placement_group_is_warned_with_the_field() -> None:
    cap = catalog.load("topology")["infiniband"]["placementGroupVms"]
    ok = _issues(_spec({**H100, "count": cap}))
    assert not [i for i in ok if "placement group" in str(i)]
    [issue] = [i for i in _issues(_spec({**H100, "count": cap + 1})) if "placement group" in i.rule]
    assert issue.path == "nodePools[0].count" and issue.value == cap + 1 and issue.severity == "warning"
    autoscaled = {k: v for k, v in H100.items() if k != "count"} | {"minCount": 0, "maxCount": 120}
    [issue] = [i for i in _issues(_spec(autoscaled)) if "placement group" in i.rule]
    assert issue.path == "nodePools[0].maxCount"


def test_a_team_over_one_infiniband_domain_is_warned() -> None:
    second = {**H100, "name": "h100b", "zones": ["2"], "labels": {"aksgpu.io/ib-domain": "h100b"}}
    issues = [i for i in _issues(_spec(H100, second)) if i.path == "access.teams[0].quota.gpus"]
    assert len(issues) == 1 and "podset-group-name" in issues[0].fix and issues[0].severity == "warning"
    capped = edit(_spec(H100, second), "access.teams.0.quota", {"gpus": 32})
    assert not [i for i in _issues(capped) if i.path == "access.teams[0].quota.gpus"], "32 GPUs fit one domain"
    assert not [i for i in _issues(_spec(H100)) if i.path == "access.teams[0].quota.gpus"]
    fleet = [i for i in _issues(preset_spec("fleet")) if i.path.startswith("access.teams") and "InfiniBand" in i.rule]
    assert fleet, "the fleet preset's research team spans three InfiniBand pools"


def test_the_prod_example_keeps_its_autoscaled_h100_pool_out_of_topology_aware_scheduling() -> None:
    """The example's h100 pool scales from 0: a topology-aware flavor would never let it grow for a
    gang, so auto leaves its flavor as it was; the labeller still labels its nodes."""
    stack = yaml.safe_load((EXAMPLE / "stacks" / "Pulumi.prod.yaml").read_text())
    spec, _ = parse_cluster_spec(stack["config"]["aksgpu:cluster"])
    assert [target.name for target in labeller_targets(spec)] == ["h100"]
    assert not [flavor for flavor in gpu_flavors(spec) if topology_aware(spec, flavor)]


def test_what_kueue_will_not_change_in_place_makes_a_new_flavor() -> None:
    """A topology-aware flavor's topologyName, node labels and tolerations are immutable (the CRD's
    rules, evaluated above): turning topology on or off, or changing the pool's taints, must give
    the flavor a new name (the queues switch to it, the old one is deleted once unused), never an
    update the API server refuses."""
    def names(pool: dict[str, Any], mode: str = "auto") -> set[str]:
        spec, _ = parse_cluster_spec(_spec(pool, topology=mode))
        return {flavor.name for flavor in gpu_flavors(spec)}

    aware, plain = names(H100), names(H100, "off")
    tainted = names({**H100, "taints": ["example.com/maintenance=true:NoSchedule"]})
    assert len({*aware, *plain, *tainted}) == 3
    assert names(H100) == aware, "the same spec keeps its name"
    assert names({**H100, "taints": ["example.com/maintenance=true:NoSchedule"]}, "off") == names(
        {**H100, "taints": ["example.com/other=true:NoSchedule"]}, "off"), "flavors without a topology keep theirs"


def test_the_script_configmap_is_node_topology_py_and_needs_only_the_standard_library(
        manifests: list[dict[str, Any]], tmp_path: Path) -> None:
    """node_topology.py and the gate's API client node_api.py, each a key of the ConfigMap: they import
    the standard library and each other only, and load as they do in the cluster (one folder, no aksgpu)."""
    import subprocess
    import sys

    configmap = next(o for o in manifests
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "aksgpu-node-topology")
    assert sorted(configmap["data"]) == ["node_api.py", "node_topology.py"]
    folder = Path(node_topology.__file__).parent
    for key, source in configmap["data"].items():
        assert source == (folder / key).read_text()
        imported = imported_top_levels(source)
        # aksgpu: tried first, in the package (tests); in the cluster the sibling file.
        assert imported - {"__future__", "aksgpu", "node_api"} <= set(sys.stdlib_module_names), \
            f"{key} runs in the gate's bare python image"
        (tmp_path / key).write_text(source)
    ran = subprocess.run([sys.executable, "-E", "-s", "-S", "-c", "import node_topology, node_api; "
                          "assert node_topology.Api is node_api.Api; print(node_topology.PLACEMENT_GROUP_LABEL)"],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and ran.stdout.strip() == node_topology.PLACEMENT_GROUP_LABEL, ran.stderr
    daemonset = _of(manifests, "DaemonSet")[LABELLER]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "/opt/aksgpu/node_topology.py"]


def test_a_queue_mixing_topology_aware_and_other_flavors_is_warned() -> None:
    """Kueue gives a podset without a topology request no topology-aware flavor in a queue that also
    has others, and one with a request only topology-aware ones (tas_flavorassigner.go at v0.19.2:
    "supports only TopologyAwareScheduling"): a team's 8-GPU queue mixing them splits its jobs."""
    source = (KUEUE / "tas_flavorassigner.go").read_text()
    assert re.search(r"// PodSet doesn't require TAS, but the flavor supports it.\n"
                     r"\tif flavor.Spec.TopologyName != nil \{\n"
                     r"\t\treturn new\(fmt.Sprintf\(\"Flavor %q supports only TopologyAwareScheduling\"", source)
    assert "return !workload.IsExplicitlyRequestingTAS(*ps) && cq.IsTASOnly()" in source, \
        "implied only in TAS-only queues"
    autoscaled = {k: v for k, v in H100.items() if k != "count"} | {
        "name": "h100b", "zones": ["2"], "minCount": 0, "maxCount": 8, "labels": {"aksgpu.io/ib-domain": "h100b"}}
    mixed = [i for i in _issues(_spec(H100, autoscaled)) if i.path == "access.teams[0]" and "mixes" in i.rule]
    assert len(mixed) == 1 and "h100" in mixed[0].rule and mixed[0].severity == "warning"
    for mode in ("on", "off"):
        assert not [i for i in _issues(_spec(H100, autoscaled, topology=mode)) if "mixes" in i.rule], mode


def test_the_clique_level_is_the_label_gpu_feature_discovery_writes(manifests: list[dict[str, Any]]) -> None:
    """NVIDIA k8s-device-plugin v0.20.0 internal/lm/imex.go: GFD labels nvidia.com/gpu.clique with
    <clusterUUID>.<cliqueID> when the node's GPUs share one NVLink fabric, and nothing otherwise;
    the GPU Operator runs GFD unless its values turn it off, and aksgpu's do not."""
    source = (DATA / "device-plugin" / "imex.go").read_text()
    assert f'"{CLIQUE_LABEL}": strings.Join([]string{{clusterUUID, cliqueID}}, "."),' in source
    assert 'if clusterUUID == "" || cliqueID == "" {\n\t\treturn empty{}, nil' in source, "no fabric: no label"
    chart_values = yaml.safe_load((DATA / "gpu-operator" / "values.yaml").read_text())
    assert chart_values["gfd"]["enabled"] is True
    spec, _ = parse_cluster_spec(_spec(GB300))
    from aksgpu.components.kubernetes.gpu_software import gpu_operator_values

    assert gpu_operator_values(spec).get("gfd", {}).get("enabled", True) is True


def test_an_infiniband_pool_no_placement_group_can_hold_is_an_error() -> None:
    """Azure caps a single-placement-group scale set at 100 VMs, 300 after a support request
    (setup-infiniband.md), and AKS creates InfiniBand pools as one (Azure/AKS CHANGELOG 2022-03-20):
    a pool declared past 300 nodes can never have them, and its cost and quota figures are fiction."""
    cap = catalog.load("topology")["infiniband"]
    autoscaled = {k: v for k, v in H100.items() if k != "count"} | {"minCount": 0}
    big = edit(_spec({**autoscaled, "maxCount": cap["placementGroupVmsOnRequest"]}), "network.podCidr", "10.240.0.0/12")
    on_request = [i for i in _issues(big) if "placement group" in i.rule]
    assert [i.severity for i in on_request] == ["warning"], "up to 300 after a support request: a warning"
    with pytest.raises(SpecError) as raised:
        _issues(_spec({**autoscaled, "maxCount": cap["placementGroupVmsOnRequest"] + 1}))
    [issue] = [i for i in raised.value.issues if "placement group" in i.rule]
    assert issue.severity == "error" and issue.path == "nodePools[0].maxCount"
    assert "aksgpu.io/ib-domain" in issue.fix


def test_no_preset_declares_an_infiniband_pool_past_one_placement_group() -> None:
    """What `aksgpu init --preset X` gives a user must not trip aksgpu's own placement-group rule."""
    for name in preset_names():
        flagged = [str(i) for i in _issues(preset_spec(name)) if "placement group" in i.rule]
        assert flagged == [], name
