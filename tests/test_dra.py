"""The NVIDIA DRA driver aksgpu declares for Grace Blackwell pools (aksgpu/components/kubernetes/dra.py),
checked against the chart's own files at v0.4.1 (tests/data/dra-driver-nvidia-gpu, copied unchanged):
its values, what its templates render with them, the ComputeDomain CRD, and the ResourceClaimTemplate
the ComputeDomain controller creates; plus the docs' ComputeDomain example and the Arm64 image rules."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu import catalog
from aksgpu.components.kubernetes.dra import (
    CLIQUE_LABEL,
    DRA_NAMESPACE,
    OPERATOR_DRIVER_ROOT,
    compute_domain_editor_role,
    compute_domain_example,
    dra_driver_values,
)
from aksgpu.components.kubernetes.objects import AGENT_POOL_LABEL, GATE_TAINT_KEY
from aksgpu.spec import parse_cluster_spec
from aksgpu.spec.base import Issue
from tests.helpers import base_spec, edit, kubernetes_manifests, shared_plan
from tests.oracles.kubernetes import DATA, template_value_paths, unknown_value_paths, validate_object
from tests.test_gb200_gb300 import GB200, GB300, POOL, errors, grace_spec

CHART = DATA / "dra-driver-nvidia-gpu"
H100_POOL = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
             "maxCount": 2, "gpu": {"driver": "None"}}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _releases(spec: dict[str, Any], chart: str) -> list[dict[str, Any]]:
    return [r.inputs for r in shared_plan(spec).by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == chart]


def coalesce(defaults: Any, overrides: Any) -> Any:
    """Helm's merge of user values over a chart's values.yaml: mappings merge key by key, anything else
    (lists included) replaces, and a null deletes the key (helm pkg/chartutil coalesce)."""
    if not isinstance(defaults, dict) or not isinstance(overrides, dict):
        return copy.deepcopy(overrides)
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = coalesce(merged.get(key), value)
    return merged


def parsed(spec: dict[str, Any]) -> Any:
    return parse_cluster_spec(spec)[0]


# --- when the release exists -------------------------------------------------------------------


def test_the_release_exists_only_with_grace_blackwell_pools() -> None:
    assert _releases(base_spec(), "dra-driver-nvidia-gpu") == []
    assert _releases(edit(edit(base_spec(), POOL, H100_POOL), "controlPlane.kubernetesVersion", "1.34"),
                     "dra-driver-nvidia-gpu") == [], "an InfiniBand H100 pool has no multi-node NVLink"
    for size in (GB300, GB200):
        [release] = _releases(grace_spec(size), "dra-driver-nvidia-gpu")
        assert release["version"] == "0.4.1" and release["namespace"] == DRA_NAMESPACE == "nvidia-dra-driver-gpu"
        assert release["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
        assert release["name"] == "dra-driver-nvidia-gpu"


def test_the_chart_version_is_the_spec_field() -> None:
    spec = edit(grace_spec(), "gpuSoftware", {"draDriver": {"chartVersion": "0.4.0"}})
    [release] = _releases(spec, "dra-driver-nvidia-gpu")
    assert release["version"] == "0.4.0"
    assert parsed(grace_spec()).gpu_software.dra_driver.chart_version == _yaml(CHART / "Chart.yaml")["version"]


def test_the_driver_namespace_is_privileged_and_the_team_role_aggregates_to_edit() -> None:
    objects = kubernetes_manifests(shared_plan(grace_spec()))
    [namespace] = [o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == DRA_NAMESPACE]
    # The kubelet plugin is privileged with host paths (templates/kubeletplugin.yaml: securityContext
    # privileged in values.yaml, hostPath volumes).
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert _yaml(CHART / "values.yaml")["kubeletPlugin"]["containers"]["computeDomains"]["securityContext"] == \
        {"privileged": True}
    role = compute_domain_editor_role()
    assert [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == role["metadata"]["name"]]
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    crd = _yaml(CHART / "crds" / "resource.nvidia.com_computedomains.yaml")
    assert role["rules"][0]["apiGroups"] == [crd["spec"]["group"]]
    assert role["rules"][0]["resources"] == [crd["spec"]["names"]["plural"]]
    for version in ("1.34", "1.35"):
        assert validate_object(role, version) == [] and validate_object(namespace, version) == []


# --- the values against the chart ------------------------------------------------------------------


def _templates() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in (CHART / "templates").iterdir()}


def test_every_value_is_a_key_the_chart_reads() -> None:
    values = dra_driver_values(parsed(grace_spec()))
    chart_values = _yaml(CHART / "values.yaml")
    assert unknown_value_paths(values, chart_values, template_value_paths(list(_templates().values()))) == []
    assert unknown_value_paths({"kubeletPlugin": {"tolerationz": []}}, chart_values, set()) == \
        ["kubeletPlugin.tolerationz"], "the oracle catches a misspelt key"


def test_the_chart_would_refuse_gpu_allocation_and_renders_compute_domains_with_these_values() -> None:
    """validation.yaml fails the install when resources.gpus.enabled is true (the chart's default)
    without gpuResourcesEnabledOverride, because the GPU Operator's device plugin also advertises the
    GPUs; aksgpu turns GPU allocation off and keeps ComputeDomains, whose controller and DeviceClasses
    render only with resources.computeDomains.enabled."""
    templates = _templates()
    assert "if and .Values.resources.gpus.enabled (not .Values.gpuResourcesEnabledOverride)" in \
        templates["validation.yaml"]
    for name in ("controller.yaml", "deviceclass-compute-domain-default-channel.yaml",
                 "deviceclass-compute-domain-daemon.yaml"):
        assert templates[name].lstrip("#").find("{{- if .Values.resources.computeDomains.enabled }}") >= 0, name
    effective = coalesce(_yaml(CHART / "values.yaml"), dra_driver_values(parsed(grace_spec())))
    assert effective["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert not effective["gpuResourcesEnabledOverride"]
    assert _yaml(CHART / "values.yaml")["resources"]["gpus"]["enabled"] is True, "the default aksgpu must turn off"


def test_the_driver_root_is_where_the_gpu_operator_installs_the_driver() -> None:
    operator = _yaml(DATA / "gpu-operator" / "values.yaml")
    assert OPERATOR_DRIVER_ROOT == operator["hostPaths"]["driverInstallDir"] == "/run/nvidia/driver"
    assert dra_driver_values(parsed(grace_spec()))["nvidiaDriverRoot"] == OPERATOR_DRIVER_ROOT
    assert _yaml(CHART / "values.yaml")["nvidiaDriverRoot"] == "/", "the chart's default is a host-installed driver"


def _spec_with_two_gb_pools_and_an_h100_pool() -> dict[str, Any]:
    spec = grace_spec()
    spec = edit(spec, "nodePools.1", {**grace_spec()["nodePools"][0], "name": "gbr", "zones": ["2"],
                                      "team": "research"})
    spec = edit(spec, "nodePools.2", H100_POOL)
    return edit(spec, "access.teams", [{"name": "research"}])


def test_the_kubelet_plugin_runs_on_the_grace_blackwell_pools_only() -> None:
    """After Helm merges aksgpu's values over the chart's, the kubelet plugin's only node affinity is
    the Grace Blackwell agent pools: the chart's NFD terms (any node with an NVIDIA GPU, which would
    include the H100 pool) are gone, because Helm replaces the nodeSelectorTerms list whole."""
    spec = parsed(_spec_with_two_gb_pools_and_an_h100_pool())
    chart_values = _yaml(CHART / "values.yaml")
    default_terms = chart_values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert any(e["key"] == "nvidia.com/gpu.present" for t in default_terms for e in t["matchExpressions"])
    effective = coalesce(chart_values, dra_driver_values(spec))["kubeletPlugin"]
    [term] = effective["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": AGENT_POOL_LABEL, "operator": "In", "values": ["gb", "gbr"]}]}
    assert set(effective["affinity"]) == {"nodeAffinity"}
    # The pools' taints (the GPU taint, the team's) and the gate's, and no blanket toleration.
    keys = {t["key"] for t in effective["tolerations"]}
    assert {"nvidia.com/gpu", "aksgpu.io/team", GATE_TAINT_KEY} <= keys
    assert all(t.get("key") for t in effective["tolerations"])


def test_the_controller_runs_on_the_system_pool() -> None:
    effective = coalesce(_yaml(CHART / "values.yaml"), dra_driver_values(parsed(grace_spec())))["controller"]
    assert effective["nodeSelector"] == {"kubernetes.azure.com/mode": "system"}
    assert effective["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}]
    # The chart's own affinity only prefers control-plane nodes (AKS has none) and spreads replicas.
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in effective["affinity"]["nodeAffinity"]


def test_the_gpu_operator_keeps_its_device_plugin_for_grace_blackwell_pools() -> None:
    """NVIDIA's ComputeDomain install keeps the GPU Operator as it is (dra-intro-install.rst @66160ebc):
    GPUs come from its device plugin, and its GPU Feature Discovery puts the clique label on nodes."""
    [operator] = _releases(grace_spec(), "gpu-operator")
    values = operator["values"]
    assert values["devicePlugin"] == {"enabled": True}
    assert "gfd" not in values or values["gfd"].get("enabled", True)
    assert _yaml(DATA / "gpu-operator" / "values.yaml")["gfd"]["enabled"] is True


# --- the ComputeDomain example ---------------------------------------------------------------------


def _fill(template: str, fields: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        return fields[match.group(1)]
    return re.sub(r"\{\{\s*\.([A-Za-z.]+)\s*\}\}", value, template)


def controller_claim_template(compute_domain: dict[str, Any], uid: str) -> dict[str, Any]:
    """The ResourceClaimTemplate the ComputeDomain controller creates for `compute_domain`, filled as
    cmd/compute-domain-controller/resourceclaimtemplate.go@v0.4.1 fills its template."""
    text = (CHART / "controller-templates" / "compute-domain-workload-claim-template.tmpl.yaml").read_text()
    return yaml.safe_load(_fill(text, {
        "Namespace": compute_domain["metadata"]["namespace"],
        "Name": compute_domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
        "Finalizer": "resource.nvidia.com/computeDomain",
        "ComputeDomainLabelKey": "resource.nvidia.com/computeDomain", "ComputeDomainLabelValue": uid,
        "TargetLabelKey": "resource.nvidia.com/computeDomainTarget", "TargetLabelValue": "Workload",
        "DeviceClassName": "compute-domain-default-channel.nvidia.com",
        "DriverName": "compute-domain.nvidia.com",
        "ChannelConfig.APIVersion": "resource.nvidia.com/v1beta1", "ChannelConfig.Kind": "ComputeDomainChannelConfig",
        "ChannelConfig.DomainID": uid,
        "ChannelConfig.AllocationMode": compute_domain["spec"]["channel"].get("allocationMode", "Single"),
    }))


def chart_device_classes(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The DeviceClasses the chart's ComputeDomain templates render with `values`, on resource.k8s.io/v1."""
    found = {}
    for name in ("deviceclass-compute-domain-default-channel.yaml", "deviceclass-compute-domain-daemon.yaml"):
        text = (CHART / "templates" / name).read_text(encoding="utf-8")
        assert "{{- if .Values.resources.computeDomains.enabled }}" in text
        if not values["resources"]["computeDomains"]["enabled"]:
            continue
        body = "\n".join(line for line in text.splitlines()
                         if not line.startswith("#") and not line.startswith("{{-"))
        body = body.replace('{{ include "dra-driver-nvidia-gpu.resourceApiVersion" . }}', "resource.k8s.io/v1")
        assert "{{" not in body
        obj = yaml.safe_load(body)
        found[obj["metadata"]["name"]] = obj
    return found


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_the_example_validates_against_the_crd_and_the_api(version: str) -> None:
    spec = parsed(edit(grace_spec(), "controlPlane.kubernetesVersion", version))
    compute_domain, job = compute_domain_example(spec.node_pools[0])
    assert validate_object(compute_domain, version) == []
    assert validate_object(job, version) == []
    claim_template = controller_claim_template(compute_domain, "6f0c1e9a-3b1d-4a51-9c1e-2f0d6c1b7a10")
    assert validate_object(claim_template, version) == []
    classes = chart_device_classes(coalesce(_yaml(CHART / "values.yaml"), dra_driver_values(spec)))
    for device_class in classes.values():
        assert validate_object(device_class, version) == []
    # The chain: the Job claims the template the ComputeDomain names, which requests a DeviceClass
    # the chart renders with aksgpu's values.
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "imex-channel",
                                      "resourceClaimTemplateName": claim_template["metadata"]["name"]}]
    assert claim_template["metadata"]["namespace"] == job["metadata"]["namespace"]
    [request] = claim_template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] in classes
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]


def test_the_oracle_rejects_a_wrong_compute_domain() -> None:
    compute_domain, _ = compute_domain_example(parsed(grace_spec()).node_pools[0])
    broken = copy.deepcopy(compute_domain)
    broken["spec"]["channel"]["allocationMode"] = "Many"
    assert validate_object(broken, "1.34"), "allocationMode is All or Single"
    broken = copy.deepcopy(compute_domain)
    broken["spec"]["numNode"] = 2
    assert validate_object(broken, "1.34"), "unknown fields are errors"
    del broken["spec"]["channel"]
    assert validate_object(broken, "1.34"), "channel is required"


def test_the_example_lands_on_the_pool_inside_one_nvlink_domain() -> None:
    spec = parsed(_spec_with_two_gb_pools_and_an_h100_pool())
    pool = spec.node_pools[0]
    compute_domain, job = compute_domain_example(pool, nodes=3)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {AGENT_POOL_LABEL: "gb"}
    tolerated = {(t["key"], t["value"], t["effect"]) for t in pod["tolerations"]}
    assert {tuple(re.split(r"[=:]", taint)) for taint in pool.node_taints} <= tolerated
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}, "a whole node's GPUs per pod"
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == CLIQUE_LABEL
    assert term["labelSelector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    assert compute_domain["spec"]["numNodes"] == 0
    team = compute_domain_example(spec.node_pools[1])[0]
    assert team["metadata"]["namespace"] == "research", "a team's pool: the team's namespace"


def test_the_readme_shows_the_example_aksgpu_builds() -> None:
    from tests.docs_pages import docs_page, section as docs_section

    section = docs_section(docs_page("guides/gpus/training.md"), "Grace Blackwell pools (ND GB200 v6, ND GB300 v6)")
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    documents = [list(yaml.safe_load_all(block)) for block in blocks]
    example = next(d for d in documents if d and isinstance(d[0], dict) and d[0].get("kind") == "ComputeDomain")
    spec = parsed(grace_spec())
    assert example == compute_domain_example(spec.node_pools[0].model_copy(update={"name": "gb300"}))


# --- the spec rules ----------------------------------------------------------------------------------


def _warnings(spec: dict[str, Any]) -> list[Issue]:
    return parse_cluster_spec(spec)[1]


def test_a_correct_gb300_pool_warns_only_of_the_feature_and_the_unverified_python_image() -> None:
    found = _warnings(grace_spec())
    ours = [(w.path, w.value) for w in found if w.path.startswith(("nodePools[0]", "controlPlane"))
            or w.path in ("gpuHealth.gate.image", "gpuHealth.gate.helperImage")]
    python = catalog.image_reference("python", "3.12")  # the pinned helper, by digest (catalog/images.yaml)
    assert ours == [("nodePools[0].vmSize", GB300), ("gpuHealth.gate.helperImage", python)]
    helper = next(w for w in found if w.path == "gpuHealth.gate.helperImage")
    assert "nodePools[0] are Arm64" in helper.rule and "not verified" in helper.rule
    assert f"docker manifest inspect {python}" in helper.fix


def test_pools_without_arm64_get_no_image_warnings() -> None:
    spec = edit(edit(base_spec(), POOL, H100_POOL), "gpuHealth", {"gate": {"image": "example.azurecr.io/check:1"}})
    assert not [w for w in _warnings(spec) if w.path in ("gpuHealth.gate.image", "gpuHealth.gate.helperImage")]


def test_an_image_of_ones_own_on_arm64_pools_is_a_warning_with_the_fix() -> None:
    spec = edit(grace_spec(), "gpuHealth", {"gate": {"image": "example.azurecr.io/aksgpu-gpu-check:0.1.0",
                                                     "command": ["python", "-m", "aksgpu.node.gpu_check"]}})
    [found] = [w for w in _warnings(spec) if w.path == "gpuHealth.gate.image"]
    assert found.value == "example.azurecr.io/aksgpu-gpu-check:0.1.0"
    assert "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" in found.rule and "--platform linux/amd64,linux/arm64" in \
        found.fix
    dockerfile = (Path(__file__).resolve().parents[1] / "aksgpu/node/gpu_check/Dockerfile").read_text()
    assert "FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" in dockerfile, "the rule names the Dockerfile's base"


def test_an_amd64_only_image_would_be_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    table = copy.deepcopy(catalog.load("in_cluster"))
    table["arm64"]["dcgm"] = {"arm64": False, "source": "a test"}
    monkeypatch.setattr(catalog, "load", lambda name,
                        _real=catalog.load: table if name == "in_cluster" else _real(name))
    [found] = [e for e in errors(grace_spec()) if e.path == "gpuHealth.gate.image"]
    assert "no linux/arm64 variant" in found.rule and found.severity == "error"


def test_each_image_aksgpu_runs_on_gpu_nodes_has_an_arm64_fact_with_a_source() -> None:
    table = catalog.load("in_cluster")
    for component in ("draDriver", "dcgmExporter", "dcgm", "devicePlugin", "pause", "python", "gpuCheck"):
        entry = table["arm64"][component]
        assert entry["arm64"] in (True, None) and len(entry["source"]) > 40, component
    assert table["arm64"]["python"]["arm64"] is None, "not verified offline: no claim"


def test_kubelet_data_on_a_temp_disk_is_refused_where_there_is_none() -> None:
    [found] = [e for e in errors(edit(grace_spec(), f"{POOL}.kubeletDisk", "Temporary"))
               if e.path == "nodePools[0].kubeletDisk"]
    assert found.value == "Temporary" and "no temp disk (resource disk)" in found.rule
    assert "NVMe (4 x 4096 GiB)" in found.rule and "kubeletDisk: OS" in found.fix


def test_an_ephemeral_os_disk_goes_on_nvme_without_a_warning() -> None:
    spec = edit(edit(grace_spec(), f"{POOL}.osDiskType", "Ephemeral"), f"{POOL}.osDiskSizeGb", 256)
    assert not [w for w in _warnings(spec) if w.path.startswith("nodePools[0].os")]
    [pool] = [p for p in shared_plan(spec).by_type("azure-native:containerservice:AgentPool")
              if p.inputs["agentPoolName"] == "gb"]
    assert pool.inputs["osDiskType"] == "Ephemeral" and pool.inputs["osDiskSizeGB"] == 256
    rules = catalog.load("vm_sizes")["graceBlackwell"]["source"]["diskController"]
    assert "NVMe only" in rules and "Ephemeral OS Disk: Supported" in rules


def test_without_the_in_cluster_layer_there_is_no_release_and_the_warning_names_the_dra_driver() -> None:
    spec = edit(grace_spec(), "inCluster", {"enabled": False})
    [found] = [w for w in _warnings(spec) if w.path == "inCluster.enabled"]
    assert "NVIDIA DRA driver for ComputeDomains" in found.rule
    assert _releases(spec, "dra-driver-nvidia-gpu") == []


def test_aksgpu_team_policies_admit_the_example_pod_in_a_team_namespace() -> None:
    """The pod the example Job creates in a team's namespace, on the team's Grace Blackwell pool, as
    aksgpu's own admission policies (toleration and GPU exposure) see it, evaluated with cel-python.
    A resource claim is not a way around them: the pod gets GPUs only by requesting nvidia.com/gpu."""
    from aksgpu.components.kubernetes.team_admission import gpu_exposure_policy, toleration_policy
    from tests.oracles.cel import denials

    spec = parsed(_spec_with_two_gb_pools_and_an_h100_pool())
    _, job = compute_domain_example(spec.node_pools[1])
    pod = {"metadata": {"name": "mnnvl-example-0-abcde", "namespace": "research",
                        **job["spec"]["template"]["metadata"]},
           "spec": job["spec"]["template"]["spec"]}
    namespace = {"metadata": {"name": "research", "labels": {"aksgpu.io/team": "research"}}}
    request = {"operation": "CREATE", "userInfo": {"username": "alice"}}
    for make in (toleration_policy, gpu_exposure_policy):
        policy, _ = make()
        assert denials(policy, obj=pod, request=request, namespace=namespace) == [], policy["metadata"]["name"]
    stolen = copy.deepcopy(pod)
    stolen["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    del stolen["spec"]["containers"][0]["resources"]["limits"]
    assert denials(gpu_exposure_policy()[0], obj=stolen, request=request, namespace=namespace), \
        "the oracle refuses GPUs taken without a request"


@pytest.mark.slow
def test_every_kubernetes_object_of_a_grace_blackwell_plan_validates_strictly() -> None:
    objects = kubernetes_manifests(shared_plan(grace_spec()))
    assert {"Namespace", "ClusterRole"} <= {o["kind"] for o in objects}
    for version in ("1.34", "1.35"):
        for obj in objects:
            assert validate_object(obj, version) == [], (obj["kind"], obj["metadata"]["name"], version)


@pytest.mark.parametrize(("version", "refused"), [("565.57.01", True), ("570.158.00", True), ("570.124.06", True),
                                                  ("570.158.01", False), ("580.105.08", False)])
def test_a_driver_older_than_the_compute_domain_floor_is_refused(version: str, refused: bool) -> None:
    spec = edit(grace_spec(), "gpuSoftware", {"gpuOperator": {"driverVersion": version}})
    if refused:
        [found] = [e for e in errors(spec) if e.path == "gpuSoftware.gpuOperator.driverVersion"]
        assert found.value == version and "570.158.01" in found.rule and "ComputeDomain" in found.rule
    else:
        assert not [w for w in _warnings(spec) if w.path == "gpuSoftware.gpuOperator.driverVersion"]
    other = edit(edit(base_spec(), POOL, H100_POOL), "gpuSoftware", {"gpuOperator": {"driverVersion": version}})
    assert not [w for w in _warnings(other) if w.path == "gpuSoftware.gpuOperator.driverVersion"], "H100: no floor"


def test_the_driver_floor_is_the_plugins_own_and_the_operators_default_meets_it() -> None:
    floor = catalog.load("in_cluster")["draDriver"]["minDriverVersion"]
    operator_default = _yaml(DATA / "gpu-operator" / "values.yaml")["driver"]["version"]
    assert tuple(map(int, operator_default.split("."))) >= tuple(map(int, floor.split(".")))
