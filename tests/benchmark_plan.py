"""Benchmark (not part of the test run): wall time and peak memory of `aksgpu plan` for the
examples and for generated specs of 10, 50 and 100 pools, each beside the bare mock floor
(tests/bare_mock_program.py: the SDK registering the same resources with nothing of aksgpu in
between, measured in the same run, the two taking turns); `validate` and `render --check` of the
examples; the start-up time of `aksgpu --help`.

Run: .venv/bin/python tests/benchmark_plan.py [--quick]
Each figure is measured in a fresh process (the cost a user pays), best of seven runs, with its CPU
time (steadier than wall time on a shared machine); the ratios are the figures to compare (absolute
times move with the machine's load). --quick: one run of the 10-pool plan and its floor, nothing
else (a few seconds; tests/test_benchmarks.py runs it so the benchmark cannot rot). Any command
that fails ends the benchmark with its output and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gpu-clusters"  # the example project: Pulumi.yaml, __main__.py, stacks/
AKSGPU = str(Path(sys.executable).with_name("aksgpu"))
FLOOR = Path(__file__).resolve().with_name("bare_mock_program.py")
RUNS = 7
POOLS = (10, 50, 100)
# A row: label, wall (s), cpu (s), peak RSS (MB), note.
Row = tuple[str, float, float, float, str]


def generated_spec(pools: int, nodes_per_pool: int) -> dict:
    """`pools` user pools (99 + the system pool = 100 AKS pools), `nodes_per_pool` each (at most 100:
    one ND H100 v5 pool is one InfiniBand placement group). The spec must pass every spec rule:
    test_benchmarks.py plans it in the benchmarks' quick mode."""
    return {
        "name": "gpu-bench",
        "location": "eastus2",
        "resourceGroup": {"name": "rg-gpu-bench"},
        "controlPlane": {
            "tier": "Premium", "apiServer": {"authorizedIpRanges": ["20.30.40.0/24"]},
            "maintenanceWindows": [
                {"schedule": "autoUpgrade", "dayOfWeek": "Sunday", "startTime": "02:00", "durationHours": 4},
                {"schedule": "nodeOsUpgrade", "dayOfWeek": "Saturday", "startTime": "02:00", "durationHours": 6},
            ],
        },
        "systemPool": {"vmSize": "Standard_D16ds_v5", "minCount": 3, "maxCount": 5},
        # A VNet of aksgpu's own, which holds the registry's private endpoint.
        "network": {"podCidr": "10.128.0.0/10", "dataplane": "cilium", "policy": "cilium",
                    "vnet": {"mode": "create", "addressSpace": ["10.224.0.0/12"],
                             "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}]}},
        "monitoring": {"managedPrometheus": True},
        # The GPU Operator installs the driver after the node joins (gpu.driver None): a short gate.
        "gpuHealth": {"gate": {"timeoutSeconds": 60}},
        "nodePools": [
            {"name": f"gpu{i}", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": [str(i % 3 + 1)],
             "minCount": 0, "maxCount": min(nodes_per_pool, 100), "gpu": {"driver": "None"},
             # One InfiniBand domain per pool, told apart for the autoscaler (the spec requires it).
             "labels": {"aksgpu.io/ib-domain": f"gpu{i}"}}
            for i in range(pools)
        ],
        "access": {"aad": {"adminGroupObjectIds": ["11111111-1111-1111-1111-111111111111"]}},
    }


def scratch_project(folder: Path) -> Path:
    """A copy of the example project in `folder` (the benchmarks write stacks there, never into the
    repository)."""
    project = folder / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(EXAMPLE / name, project / name)
    shutil.copytree(EXAMPLE / "stacks", project / "stacks")
    return project


def write_generated_stack(project: Path, pools: int) -> Path:
    """A stack of `pools` AKS pools (the system pool and pools - 1 GPU pools), 5,000 nodes at most."""
    path = project / "stacks" / f"Pulumi.bench{pools}.yaml"
    path.write_text(yaml.safe_dump({"config": {"aksgpu:cluster": generated_spec(pools - 1, 5000 // pools)}}),
                    encoding="utf-8")
    return path


def _run_once(args: list[str], cwd: Path) -> tuple[float, float, float, str]:
    """Wall time, CPU time, peak RSS and stdout of one fresh process; a failure ends the benchmark."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if status != 0:
            raise SystemExit(f"benchmark failed: {' '.join(args)} (in {cwd}) exited with status "
                             f"{os.waitstatus_to_exitcode(status)}:\n{stdout[-2000:]}{err.read().decode(errors='replace')[-4000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def measure(*commands: list[str], cwd: Path, runs: int = RUNS) -> list[tuple[float, float, float, str]]:
    """For each command: best wall time (s), its CPU time (s, user + system), peak RSS (MB) and
    stdout of running it in a fresh process. The commands take turns, run by run, so a slow spell of
    this shared machine hits each alike and their ratio holds."""
    best: list[tuple[float, float, float, str]] = [(float("inf"), 0.0, 0.0, "")] * len(commands)
    for _ in range(runs):
        for index, args in enumerate(commands):
            figures = _run_once(args, cwd)
            if figures[0] < best[index][0]:
                best[index] = figures
    return best


Figures = tuple[float, float, float, str]  # wall (s), cpu (s), peak RSS (MB), stdout


def plan_and_floor(stack: Path, label: str, rows: list[Row],
                   runs: int = RUNS) -> tuple[Figures, Figures, Figures, dict]:
    """`aksgpu plan` of a stack and the bare mock program registering the same resources
    (tests/bare_mock_program.py), the SDKs imported as shipped and per class, taking turns; returns
    the plan's and the two floors' figures and the plan document."""
    project = stack.parents[1]
    first = _run_once([AKSGPU, "plan", str(stack), "--json"], project)
    document = first[3]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(document)
    try:
        floors = ([sys.executable, str(FLOOR), handle.name], [sys.executable, str(FLOOR), handle.name, "--per-class"])
        if runs == 1:  # --quick: the run that wrote the document is the plan's figure
            plan, floor, strict = first, *(_run_once(args, project) for args in floors)
        else:
            plan, floor, strict = measure([AKSGPU, "plan", str(stack), "--json"], *floors, cwd=project, runs=runs)
    finally:
        os.unlink(handle.name)
    parsed = json.loads(document)
    resources = len(parsed["resources"])
    rows.append((f"plan {label}", *plan[:3], f"{plan[0] / floor[0]:.2f}x the floor (cpu {plan[1] / floor[1]:.2f}x); "
                 f"{plan[0] / strict[0]:.2f}x the per-class floor (cpu {plan[1] / strict[1]:.2f}x)"))
    rows.append((f"  bare mock floor, same {resources} resources", *floor[:3], "the SDKs' packages as shipped"))
    rows.append(("  bare mock floor, per-class imports", *strict[:3],
                 "the SDKs' modules as the plan loads and runs them"))
    return plan, floor, strict, parsed


def print_rows(rows: list[Row]) -> None:
    width = max(len(row[0]) for row in rows)
    print(f"{'what'.ljust(width)}  wall (s)  cpu (s)  peak RSS (MB)")
    for label, seconds, cpu, megabytes, note in rows:
        print(f"{label.ljust(width)}  {seconds:8.2f}  {cpu:7.2f}  {megabytes:13.0f}  {note}".rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run of the 10-pool plan and its floor")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of each command (default {RUNS})")
    options = parser.parse_args()
    quick = options.quick
    runs = 1 if quick else options.runs
    rows: list[Row] = []
    scaled = []
    with tempfile.TemporaryDirectory() as folder:
        project = scratch_project(Path(folder))
        if not quick:
            for stack in sorted((project / "stacks").glob("Pulumi.*.yaml")):
                plan_and_floor(stack, stack.name, rows, runs)
        for pools in POOLS[:1] if quick else POOLS:
            path = write_generated_stack(project, pools)
            plan, floor, strict, document = plan_and_floor(path, f"{pools} pools", rows, runs)
            rows[-3] = (f"plan {pools} pools, {document['summary']['maxNodes']} nodes", *rows[-3][1:])
            scaled.append((pools, plan, floor, strict))
        if not quick:
            for label, args in (("validate --spec-only (examples)", [AKSGPU, "validate", "--spec-only"]),
                                ("validate with the security policies (examples)", [AKSGPU, "validate"]),
                                ("render --check (examples)", [AKSGPU, "render", "--check"]),
                                ("aksgpu --help", [AKSGPU, "--help"])):
                rows.append((label, *measure(args, cwd=project, runs=runs)[0][:3], ""))
    print_rows(rows)
    if len(scaled) > 1:
        (few, few_plan, few_floor, few_strict), (many, many_plan, many_floor, many_strict) = scaled[0], scaled[-1]
        for what, low, high in (("plan", few_plan, many_plan), ("floor", few_floor, many_floor),
                                ("per-class floor", few_strict, many_strict)):
            slope = (high[0] - low[0]) / (many - few)
            print(f"{what}: {slope * 1000:.1f} ms per pool between {few} and {many} pools, "
                  f"{low[0] - few * slope:.2f} s fixed (wall)")
    for index, kind in ((0, "wall"), (1, "cpu")):
        print(f"plan/floor ratios ({kind}): "
              + ", ".join(f"{pools} pools {plan[index] / floor[index]:.2f}x" for pools, plan, floor, _ in scaled))
        print(f"plan/per-class floor ratios ({kind}): "
              + ", ".join(f"{pools} pools {plan[index] / strict[index]:.2f}x" for pools, plan, _, strict in scaled))
    print(f"best of {runs} fresh processes each, plan and floor taking turns; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
