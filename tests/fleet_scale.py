"""A generated fleet at the scale issue 15 asks for: N members of 5,000 nodes each (AKS's limit per
cluster), in a copy of the fleet example's project. Used by tests/test_fleet_scale.py and
tests/benchmark_fleet.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import FLEET_EXAMPLE

REGIONS = ("eastus2", "westus3", "southcentralus", "eastus")
NODES_PER_MEMBER = 5000
# The training preset's InfiniBand H100 pool at its size (one placement group: 100 nodes), five
# H100 NVL pools of 970 nodes (no InfiniBand, so no placement-group cap; under AKS's 1,000 per pool,
# leaving room for an upgrade's surge node), and the preset's CPU and system pools:
# 100 + 5 x 970 + 44 + 6 = 5,000 nodes, AKS's limit per cluster.
GPU_POOLS = (100, 970, 970, 970, 970, 970)
CPU_MAX, SYSTEM_MAX = 44, 6
NVL_SIZE = "Standard_NC80adis_H100_v5"  # 2 x H100 NVL per node


def member(index: int) -> dict[str, Any]:
    """Member `index`: its own region (round robin), VNet 10.(8 + 8i).0.0/13 and resource group."""
    octet = 8 + 8 * index
    pools = [{"name": "h100", "maxCount": GPU_POOLS[0]}, {"name": "cpu", "maxCount": CPU_MAX}]
    pools += [{"name": f"h100{letter}", "kind": "gpu", "vmSize": NVL_SIZE, "zones": ["1"],
               "minCount": 0, "maxCount": count}
              for letter, count in zip("bcdef", GPU_POOLS[1:], strict=True)]
    return {
        "name": f"m{index:02d}",
        "group": "canary" if index == 0 else f"wave{1 + (index - 1) % 3}",
        "overrides": {
            "name": f"gpu-m{index:02d}",
            "location": REGIONS[index % len(REGIONS)],
            "resourceGroup": {"name": f"rg-gpu-m{index:02d}"},
            "systemPool": {"vmSize": "Standard_D16ds_v5", "maxCount": SYSTEM_MAX},
            "nodePools": pools,
            "network": {"podCidr": "100.64.0.0/11", "vnet": {
                "addressSpace": [f"10.{octet}.0.0/13"],
                "subnets": [{"name": "nodes", "cidr": f"10.{octet}.0.0/16"},
                            {"name": "apiserver", "cidr": f"10.{octet + 1}.0.0/28"}]}},
            "access": {"teams": [{"name": "research", "quota": {"gpus": 8 * GPU_POOLS[0] + 2 * sum(GPU_POOLS[1:]),
                                                                  "cpu": "96000",
                                                                  "memory": "2000Ti"}}]},
            "policy": {"waivers": [{"rule": "pool-user-min-nodes", "resources": ["h100*", "cpu"],
                                    "reason": "GPU pools scale from zero; the CPU pool grows with load."},
                                   {"rule": "pool-ephemeral-os-disk", "resources": ["h100*"],
                                    "reason": "GPU nodes keep a managed OS disk so the temp disk holds images."}]},
        },
    }


def fleet_project(folder: Path, members: int) -> Path:
    """A project in `folder` whose environment "scale" is a fleet of `members` members; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(FLEET_EXAMPLE / name, folder / name)
    (folder / "stacks").mkdir(exist_ok=True)
    document = yaml.safe_load((FLEET_EXAMPLE / "stacks" / "environments.yaml").read_text())
    environment = document["environments"]["training"]
    environment["fleet"]["name"] = "gpu-scale"
    environment["fleet"]["resourceGroup"] = "rg-gpu-scale-fleet"
    groups = sorted({m["group"] for m in (member(i) for i in range(members))} - {"canary"})
    environment["fleet"]["updateStages"] = [{"name": "canary", "groups": ["canary"], "afterStageWaitSeconds": 86400}]
    if groups:
        environment["fleet"]["updateStages"].append({"name": "rest", "groups": groups})
    environment["fleet"]["members"] = [member(i) for i in range(members)]
    document["environments"] = {"scale": environment}
    (folder / "stacks" / "environments.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder
