"""The ARM template tests/run_checkov.py hands to checkov says what the plan would send."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from aksgpu.plan.planner import Plan
from tests.arm_template import ARM_TYPES, arm_template


@pytest.mark.parametrize("type_", sorted(ARM_TYPES))
def test_each_type_uses_the_api_version_of_its_sdk_class(type_: str) -> None:
    _, module, name = type_.split(":")
    package = importlib.import_module(f"pulumi_azure_native.{module}")
    sdk_class = getattr(package, name)
    api_version = ARM_TYPES[type_][1]
    source = Path(inspect.getsourcefile(sdk_class) or "").read_text(encoding="utf-8")
    found = re.search(r"Uses Azure REST API version (\S+?)\.", source)
    assert found and found.group(1) == api_version, (type_, found and found.group(1))


def test_the_template_carries_the_bodies_under_their_arm_names(example_plans: dict[str, Plan]) -> None:
    template = arm_template(example_plans["prod"])
    by_type: dict[str, list[dict]] = {}
    for resource in template["resources"]:
        by_type.setdefault(resource["type"], []).append(resource)
    [cluster] = by_type["Microsoft.ContainerService/managedClusters"]
    assert cluster["name"] == "gpu-prod" and cluster["location"] == "eastus2" and cluster["sku"]["tier"] == "Premium"
    assert "resourceGroupName" not in cluster["properties"] and "resourceName" not in cluster["properties"]
    assert cluster["properties"]["securityProfile"]["defender"]["securityMonitoring"] == {"enabled": True}
    assert all(isinstance(v, dict) for v in cluster["identity"]["userAssignedIdentities"].values())
    pools = {pool["name"] for pool in by_type["Microsoft.ContainerService/managedClusters/agentPools"]}
    assert "gpu-prod/h100" in pools
    keys = {key["name"] for key in by_type["Microsoft.KeyVault/vaults/keys"]}
    assert keys == {"gpu-prod-kms/aks-kms", "gpu-prod-kms/aks-disks"}
    subnets = by_type["Microsoft.Network/virtualNetworks/subnets"]
    assert subnets and all(subnet["properties"]["defaultOutboundAccess"] is False for subnet in subnets)
    assert not {r["type"] for r in template["resources"]} - {arm_type for arm_type, *_ in ARM_TYPES.values()}
