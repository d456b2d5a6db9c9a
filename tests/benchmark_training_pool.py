"""Benchmark (not part of the test run): plan a 64-node ND H100 v5 training cluster (one
InfiniBand pool of 512 GPUs, one team, gang scheduling, the GPU node gate) and print what it
declares, by kind, and the plan time beside the bare mock floor (tests/bare_mock_program.py).

It shows what aksgpu adds for multi-node training (the RDMA stack, the NCCL settings, the Kueue
Topology and flavors, the node gate and its cross-node acceptance), as objects a reviewer can
count, and what planning such a cluster costs.

Run: .venv/bin/python tests/benchmark_training_pool.py [--nodes 64] [--quick]
--quick: 4 nodes, one run of the plan and its floor (tests/test_benchmarks.py runs it). A failed
command ends the benchmark with its output and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.benchmark_plan import AKSGPU, RUNS, plan_and_floor, scratch_project

GPUS_PER_NODE = 8  # Standard_ND96isr_H100_v5 (aksgpu/catalog/vm_sizes.yaml)


def training_spec(nodes: int) -> dict[str, Any]:
    """A cluster whose one GPU pool is a fixed `nodes`-node InfiniBand domain owned by one team, with
    quota for all of it and Kueue in front of it, topology-aware."""
    return {
        "name": "gpu-train",
        "location": "eastus2",
        "resourceGroup": {"name": "rg-gpu-train"},
        "controlPlane": {
            "tier": "Standard", "kubernetesVersion": "1.34",
            "apiServer": {"authorizedIpRanges": ["52.160.10.0/24"]},
            "maintenanceWindows": [
                {"schedule": "autoUpgrade", "dayOfWeek": "Sunday", "startTime": "02:00", "durationHours": 4},
                {"schedule": "nodeOsUpgrade", "dayOfWeek": "Saturday", "startTime": "02:00", "durationHours": 6},
            ],
        },
        "systemPool": {"vmSize": "Standard_D16ds_v5", "minCount": 3, "maxCount": 5},
        "network": {"podCidr": "10.128.0.0/14", "dataplane": "cilium", "policy": "cilium",
                    "vnet": {"mode": "create", "addressSpace": ["10.224.0.0/12"],
                             "subnets": [{"name": "nodes", "cidr": "10.224.0.0/20"},
                                         {"name": "gpu", "cidr": "10.225.0.0/20"}]}},
        "nodePools": [
            {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"],
             # A fixed size: Kueue places a topology-aware gang only on nodes that exist, so
             # gangScheduling.topology auto gives topology-aware flavors to fixed-size pools.
             "count": nodes, "team": "research",
             "subnet": "gpu", "labels": {"aksgpu.io/ib-domain": "h100"}, "gpu": {"driver": "None"}},
        ],
        "access": {
            "aad": {"adminGroupObjectIds": ["11111111-1111-1111-1111-111111111111"]},
            "teams": [{"name": "research", "groupObjectIds": ["22222222-2222-2222-2222-222222222222"],
                       "quota": {"gpus": nodes * GPUS_PER_NODE}}],
        },
        "gangScheduling": {"enabled": True},
    }


def kinds(document: dict[str, Any]) -> Counter[str]:
    """Declared resources by Kubernetes kind (apiVersion/kind) or Pulumi type."""
    counts: Counter[str] = Counter()
    for resource in document["resources"]:
        inputs = resource.get("inputs") or {}
        kind = inputs.get("kind") if isinstance(inputs, dict) else None
        api = inputs.get("apiVersion") if isinstance(inputs, dict) else None
        counts[f"{api}/{kind}" if kind and api else resource["type"]] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64, help="nodes in the InfiniBand pool (default 64)")
    parser.add_argument("--quick", action="store_true", help="4 nodes, one run of the plan and its floor")
    options = parser.parse_args()
    nodes = 4 if options.quick else options.nodes
    runs = 1 if options.quick else RUNS
    rows: list[tuple[str, float, float, float, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        project = scratch_project(Path(folder))
        stack = project / "stacks" / "Pulumi.train.yaml"
        stack.write_text(yaml.safe_dump({"config": {"aksgpu:cluster": training_spec(nodes)}}))
        planned = subprocess.run([AKSGPU, "plan", str(stack), "--json"], cwd=project, capture_output=True,
                                 text=True)
        if planned.returncode != 0:
            sys.exit(f"the training spec does not plan:\n{planned.stdout}{planned.stderr}")
        document = json.loads(planned.stdout)
        plan_and_floor(stack, f"{nodes} x ND96isr_H100_v5 ({nodes * GPUS_PER_NODE} GPUs)", rows, runs)
    counts = kinds(document)
    print(f"declared: {sum(counts.values())} resources, maxNodes {document['summary']['maxNodes']}")
    width = max(len(kind) for kind in counts)
    for kind, count in sorted(counts.items()):
        print(f"  {kind.ljust(width)}  {count:4d}")
    width = max(len(row[0]) for row in rows)
    print(f"\n{'what'.ljust(width)}  wall (s)  cpu (s)  peak RSS (MB)")
    for label, seconds, cpu, megabytes, note in rows:
        print(f"{label.ljust(width)}  {seconds:8.2f}  {cpu:7.2f}  {megabytes:13.0f}  {note}".rstrip())
    print(f"best of {runs} fresh processes each, plan and floor taking turns; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
