"""The Grace Blackwell sizes (ND GB200 v6, ND GB300 v6): GB300 in the catalog, and the rules AKS
pools of these sizes have (vm_sizes.yaml graceBlackwell): osSku Ubuntu2404, gpu.driver None,
Kubernetes 1.34+ for DRA, and the AKSInfinibandSupport feature unregistered."""

from __future__ import annotations

from typing import Any

import pytest

from aksgpu import catalog
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.base import Issue
from tests.helpers import REMOVE, base_spec, edit, plan_spec

GB300 = "Standard_ND128isr_GB300_v6"
GB200 = "Standard_ND128isr_NDR_GB200_v6"
POOL = "nodePools.0"


def grace_spec(vm_size: str = GB300) -> dict[str, Any]:
    """base_spec with its GPU pool on a Grace Blackwell size, set up the way AKS needs it (one zone:
    InfiniBand connects one scale set)."""
    pool = {"name": "gb", "kind": "gpu", "vmSize": vm_size, "zones": ["1"], "minCount": 0, "maxCount": 18,
            "osSku": "Ubuntu2404", "gpu": {"driver": "None"}}
    # eastus2: Azure sells GB200 there (azure_availability.yaml); the table has no GB300 row yet.
    spec = edit(edit(base_spec(), POOL, pool), "controlPlane.kubernetesVersion", "1.34")
    # No auto-upgrade: the tests pin patch versions too, which the patch channel would move past.
    spec = edit(spec, "controlPlane.upgradeChannel", "none")
    return edit(spec, "location", "eastus2")


def errors(spec: dict[str, Any]) -> list[Issue]:
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(spec)
    return raised.value.errors


def warnings(spec: dict[str, Any]) -> list[Issue]:
    return parse_cluster_spec(spec)[1]


def test_gb300_is_in_the_catalog_with_the_microsoft_page_figures() -> None:
    size = catalog.vm_size(GB300)
    assert size is not None
    assert (size.vcpus, size.memory_gib, size.gpus, size.gpu_memory_gb) == (128, 864, 4, 288)
    assert size.nvme is not None and (size.nvme.disks, size.nvme.disk_gib) == (4, 4096) and size.temp_disk_gib == 0
    assert size.infiniband == "800 Gb/s" and size.cpu_architecture == "Arm64"
    assert size.quota_family == "standardNDISRGB300V6Family"
    assert size.gpu is not None and (size.vendor, size.gpu.architecture, size.mig) == ("nvidia", "Blackwell", False)
    model = size.gpu
    assert model.bf16_dense_tflops is None and "not collected" in model.peak_source, "no figure was invented"


def test_the_rules_name_both_series_and_each_rule_has_a_source() -> None:
    table = catalog.load("vm_sizes")
    rules = table["graceBlackwell"]
    assert {catalog.vm_sizes()[GB200].series, catalog.vm_sizes()[GB300].series} == set(rules["series"])
    assert set(rules["series"]) <= set(table["series"])
    for rule in ("osSku", "gpuDriver", "minKubernetes", "infinibandFeature"):
        assert rules[rule] and rules["source"][rule]


@pytest.mark.parametrize("vm_size", [GB300, GB200])
def test_a_correct_pool_validates_with_only_the_feature_warning(vm_size: str) -> None:
    found = [w for w in warnings(grace_spec(vm_size)) if w.path.startswith(("nodePools[0].vmSize", "nodePools[0].os",
                                                                          "nodePools[0].gpu.driver",
                                                                          "controlPlane.kubernetesVersion"))]
    assert [(w.path, w.value) for w in found] == [("nodePools[0].vmSize", vm_size)]
    assert "AKSInfinibandSupport feature must be unregistered" in found[0].rule
    assert "az feature unregister" in found[0].fix and "another subscription" not in found[0].rule


@pytest.mark.parametrize("vm_size", [GB300, GB200])
@pytest.mark.parametrize("os_sku", ["Ubuntu", "Ubuntu2204", "AzureLinux", "AzureLinux3"])
def test_other_os_skus_are_refused(vm_size: str, os_sku: str) -> None:
    found = [e for e in errors(edit(grace_spec(vm_size), f"{POOL}.osSku", os_sku)) if e.path == "nodePools[0].osSku"]
    assert len(found) == 1 and found[0].value == os_sku
    assert "only NVMe disk controllers" in found[0].rule and "ai-infrastructure-on-azure" in found[0].rule
    assert found[0].fix == "set osSku: Ubuntu2404"


def test_the_default_os_sku_is_refused_too() -> None:
    found = errors(edit(grace_spec(), f"{POOL}.osSku", REMOVE))
    assert [(e.path, e.value) for e in found if e.path.endswith("osSku")] == [("nodePools[0].osSku", "Ubuntu")]


@pytest.mark.parametrize("gpu", [{"driver": "Install"}, REMOVE])
def test_the_aks_installed_driver_is_refused(gpu: Any) -> None:
    found = [e for e in errors(edit(grace_spec(), f"{POOL}.gpu", gpu)) if e.path == "nodePools[0].gpu.driver"]
    assert len(found) == 1 and found[0].value == "Install"
    assert "--gpu-driver None" in found[0].rule and "GB300" in found[0].rule
    assert "gpu.driver: None" in found[0].fix and "DRA driver" in found[0].fix


def _calendar(issue: Any) -> bool:
    """An issue of AKS's version calendar (spec/control_plane.py), not of these pools' rules."""
    return "AKS's calendar" in issue.fix or "version table" in issue.rule


@pytest.mark.parametrize("version", ["1.33", "1.33.9", "1.30.0", "1.34.0", "1.34.1"])
def test_kubernetes_before_1_34_2_is_refused(version: str) -> None:
    """NVIDIA's DRA driver needs 1.34.2 or later (docs/prerequisites.md@v0.4.1), so an explicit
    1.34.0 or 1.34.1 is refused as well as every older minor version."""
    found = [e for e in errors(edit(grace_spec(), "controlPlane.kubernetesVersion", version))
             if e.path == "controlPlane.kubernetesVersion" and not _calendar(e)]
    assert len(found) == 1 and found[0].value == version
    assert "nodePools[0]" in found[0].rule and "1.34.2 or newer" in found[0].rule and "DRA" in found[0].rule
    assert "v1.34.2 or later" in found[0].rule, "the rule quotes its source"
    assert '"1.34"' in found[0].fix and "latest 1.34 patch" in found[0].fix


@pytest.mark.parametrize("version", ["1.34", "1.34.2", "1.34.9", "1.35", "1.36.2", "1.38"])
def test_kubernetes_1_34_2_to_1_38_pass(version: str) -> None:
    """"1.34" is AKS's latest 1.34 patch (1.34.2 or later since AKS's 2026-02 release)."""
    spec = edit(grace_spec(), "controlPlane.kubernetesVersion", version)
    assert not [w for w in warnings(spec) if w.path == "controlPlane.kubernetesVersion" and not _calendar(w)]


@pytest.mark.parametrize("version", ["1.39", "1.40.1", "2.0"])
def test_kubernetes_after_1_38_is_refused_for_want_of_ubuntu2404(version: str) -> None:
    found = [e for e in errors(edit(grace_spec(), "controlPlane.kubernetesVersion", version))
             if e.path == "controlPlane.kubernetesVersion" and not _calendar(e)]
    assert len(found) == 1 and found[0].value == version
    assert "osSku Ubuntu2404" in found[0].rule and "up to Kubernetes 1.38" in found[0].rule
    assert "upgrade-os-version.md" in found[0].rule and '"1.38"' in found[0].fix


def test_the_version_bounds_come_from_the_table() -> None:
    rules = catalog.load("vm_sizes")["graceBlackwell"]
    assert (rules["minKubernetes"], rules["maxKubernetes"]) == ("1.34.2", "1.38")
    assert "v1.34.2 or later" in rules["source"]["minKubernetes"]
    assert "1.32 to 1.38" in rules["source"]["maxKubernetes"]


def test_no_kubernetes_version_is_a_warning_that_aks_default_may_be_older() -> None:
    found = [w for w in warnings(edit(grace_spec(), "controlPlane.kubernetesVersion", REMOVE))
             if w.path == "controlPlane.kubernetesVersion"]
    assert len(found) == 1 and found[0].value is None and found[0].severity == "warning"
    assert "AKS's default, which may be older" in found[0].rule


def test_an_infiniband_pool_of_another_size_in_the_cluster_is_named_as_a_conflict() -> None:
    h100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
            "maxCount": 2}
    found = [w for w in warnings(edit(grace_spec(), "nodePools.1", h100))
             if "AKSInfinibandSupport" in w.rule]
    assert len(found) == 1 and "Standard_ND96isr_H100_v5" in found[0].rule and "Registered" in found[0].rule


def test_other_gpu_and_cpu_pools_get_none_of_these_rules() -> None:
    spec = edit(base_spec(), "controlPlane.kubernetesVersion", "1.35")
    spec = edit(spec, "nodePools.1", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1})
    found = parse_cluster_spec(spec)[1]
    assert not [w for w in found if "AKSInfinibandSupport" in w.rule or w.path == "controlPlane.kubernetesVersion"]


def test_a_correct_gb300_pool_plans_as_an_arm64_ubuntu2404_pool_without_the_aks_driver() -> None:
    plan = plan_spec(grace_spec())
    pools = {p.inputs["agentPoolName"]: p.inputs for p in plan.by_type("azure-native:containerservice:AgentPool")}
    inputs = pools["gb"]
    assert inputs["vmSize"] == GB300
    assert inputs["osSKU"] == "Ubuntu2404" and inputs["gpuProfile"] == {"driver": "None"}
    assert inputs["orchestratorVersion"] == "1.34" and inputs["availabilityZones"] == ["1"]
