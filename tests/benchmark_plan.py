"""Benchmark (not part of the test run): wall time and peak memory of `aksgpu plan` for the
examples and for a generated 100-pool, 5,000-node spec, and the start-up time of `aksgpu --help`.

Run: .venv/bin/python tests/benchmark_plan.py
Each figure is measured in a fresh process (the cost a user pays), best of seven runs, with its CPU time (steadier than wall time on a shared machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gpu-clusters"  # the example project: Pulumi.yaml, __main__.py, stacks/
AKSGPU = str(Path(sys.executable).with_name("aksgpu"))
RUNS = 7


def generated_spec(pools: int, nodes_per_pool: int) -> dict:
    """`pools` user pools (99 + the system pool = 100 AKS pools), `nodes_per_pool` each."""
    return {
        "name": "gpu-bench",
        "location": "eastus2",
        "resourceGroup": {"name": "rg-gpu-bench"},
        "controlPlane": {"tier": "Premium", "apiServer": {"access": "private"}},
        "systemPool": {"vmSize": "Standard_D16ds_v5", "minCount": 3, "maxCount": 5},
        "network": {"podCidr": "10.128.0.0/10", "dataplane": "cilium", "policy": "cilium"},
        "nodePools": [
            {"name": f"gpu{i}", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": [str(i % 3 + 1)],
             "minCount": 0, "maxCount": nodes_per_pool,
             # One InfiniBand domain per pool, told apart for the autoscaler (the spec requires it).
             "labels": {"aksgpu.io/ib-domain": f"gpu{i}"}}
            for i in range(pools)
        ],
        "access": {"aad": {"adminGroupObjectIds": ["11111111-1111-1111-1111-111111111111"]}},
    }


def measure(args: list[str], cwd: Path) -> tuple[float, float, float]:
    """Best wall time (s), its CPU time (s, user + system) and peak RSS (MB) of running `args`
    in a fresh process. CPU time varies less than wall time on a shared machine."""
    best = (float("inf"), 0.0, 0.0)
    for _ in range(RUNS):
        start = time.perf_counter()
        process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, _, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        if best[0] > elapsed:
            best = (elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
    return best


def main() -> None:
    rows = []
    for stack in sorted((EXAMPLE / "stacks").glob("Pulumi.*.yaml")):
        rows.append((f"plan {stack.name}", *measure([AKSGPU, "plan", str(stack), "--json"], EXAMPLE)))
    # Inside the project, so the stack files find Pulumi.yaml and __main__.py above them.
    with tempfile.TemporaryDirectory(dir=EXAMPLE / "stacks") as folder:
        stacks = Path(folder)
        for pools in (25, 50, 99):
            path = stacks / f"Pulumi.bench{pools}.yaml"
            nodes = 5000 // (pools + 1) if pools < 99 else 50
            path.write_text(yaml.safe_dump({"config": {"aksgpu:cluster": generated_spec(pools, nodes)}}))
            document = json.loads(subprocess.run([AKSGPU, "plan", str(path), "--json"], cwd=EXAMPLE, check=True,
                                                 capture_output=True, text=True).stdout)
            label = f"plan {pools + 1} pools, {document['summary']['maxNodes']} nodes"
            rows.append((label, *measure([AKSGPU, "plan", str(path), "--json"], EXAMPLE)))
    scaled = [(int(label.split()[1]), seconds) for label, seconds, _, _ in rows if label.endswith(" nodes")]
    (few_pools, few_seconds), (many_pools, many_seconds) = scaled[0], scaled[-1]
    per_pool_ms = (many_seconds - few_seconds) / (many_pools - few_pools) * 1000
    rows.append(("aksgpu --help", *measure([AKSGPU, "--help"], EXAMPLE)))
    width = max(len(label) for label, _, _, _ in rows)
    print(f"{'what'.ljust(width)}  wall (s)  cpu (s)  peak RSS (MB)")
    for label, seconds, cpu, megabytes in rows:
        print(f"{label.ljust(width)}  {seconds:8.2f}  {cpu:7.2f}  {megabytes:13.0f}")
    print(f"plan time grows by {per_pool_ms:.1f} ms per pool between {few_pools} and {many_pools} pools")
    print(f"best of {RUNS} fresh processes each; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
