"""Benchmark (not part of the test run): `aksgpu plan` of a generated fleet of N members of 5,000
nodes each (tests/fleet_scale.py), for N = 1, 5, 10 and 20: wall time, CPU time, peak memory
and the time each added member costs (between one row and the next): constant if the plan time
grows linearly with the members.

Run: .venv/bin/python tests/benchmark_fleet.py [N ...] [--quick] [--baseline DIR] [--every-core-only]
Each figure is one fresh `aksgpu plan FLEET --json` process (plans on every core: aksgpu/plan/workers.py),
after `aksgpu render` wrote the fleet's stacks. Then, for the largest N, `aksgpu validate` and
`aksgpu plan FLEET` on every core against the same command planning one stack after another
(AKSGPU_WORKERS=1), interleaved (tests/command_timing.py), their output checked equal.
--baseline DIR adds the same commands of another checkout (DIR/.venv, in a fleet its own
tests/fleet_scale.py generates and its aksgpu renders), interleaved, and their ratio (issue 28
measures against 638439c); --every-core-only then leaves out the one-after-another runs and the
table (the largest N only). --quick: N = 2 and one round (CI runs it so that it cannot rot). The CPU
column is the command's and the plan workers it forks and waits for (on Linux; a plan server's
workers, which it does not wait for, are left out). A failed command ends the benchmark with its
output and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fleet_scale import NODES_PER_MEMBER, fleet_project

AKSGPU = str(Path(sys.executable).with_name("aksgpu"))


def _run(args: list[str], cwd: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([AKSGPU, *args], cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"aksgpu {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), result.stdout


def main(counts: list[int], rounds: int = 3, baseline: Path | None = None, table: bool = True) -> None:
    if not table:
        with tempfile.TemporaryDirectory(prefix="aksgpu-fleet-bench-") as folder:
            project = fleet_project(Path(folder) / f"fleet{counts[-1]}", counts[-1])
            _run(["render"], project)
            _every_core(project, counts[-1], rounds, baseline, Path(folder), sequential=False)
        return
    print(f"aksgpu plan of a fleet of N members x {NODES_PER_MEMBER:,} nodes (one fresh process each)")
    print(f"{'members':>7}  {'nodes':>9}  {'resources':>9}  {'wall s':>7}  {'cpu s':>7}  {'peak MB':>7}  "
          f"{'s per added member':>18}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aksgpu-fleet-bench-") as folder:
        for members in counts:
            project = fleet_project(Path(folder) / f"fleet{members}", members)
            _run(["render"], project)
            wall, cpu, out = _run(["plan", "scale", "--json"], project)
            document = json.loads(out)
            resources = len(document["resources"]) + sum(len(m["resources"]) for m in document["members"].values())
            nodes = document["fleet"]["totals"]["maxNodes"]
            # The children's peak RSS so far: the fleets grow, so it is this run's.
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            slope = f"{(wall - rows[-1][1]) / (members - rows[-1][0]):.2f}" if rows else "-"
            rows.append((members, wall))
            print(f"{members:>7}  {nodes:>9,}  {resources:>9,}  {wall:>7.1f}  {cpu:>7.1f}  {peak:>7.0f}  {slope:>18}")
        _every_core(project, counts[-1], rounds, baseline, Path(folder))


def _baseline_project(baseline: Path, folder: Path, members: int) -> Path:
    """The fleet of `members` as the baseline checkout generates it (its spec rules are its own), rendered."""
    from tests.command_timing import baseline_aksgpu

    project = folder / f"baseline{members}"
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from tests.fleet_scale import fleet_project; fleet_project(Path(sys.argv[2]), int(sys.argv[3]))")
    subprocess.run([str(baseline / ".venv" / "bin" / "python"), "-c", code, str(baseline), str(project), str(members)],
                   check=True, cwd=baseline)
    subprocess.run([baseline_aksgpu(baseline), "render"], cwd=project, check=True, capture_output=True)
    return project


def _every_core(project: Path, members: int, rounds: int, baseline: Path | None, folder: Path,
                sequential: bool = True) -> None:
    """validate and plan of the fleet on every core against one stack after another (and the baseline's)."""
    from tests.command_timing import Variant, baseline_aksgpu, interleaved, machine

    base_project = _baseline_project(baseline, folder, members) if baseline is not None else None
    print(f"\n{members} members ({machine()}; median of {rounds} interleaved rounds"
          f"{f'; baseline {baseline}' if baseline is not None else ''}):")
    for args in (["validate"], ["plan", "scale"]):
        variants: dict[str, Variant] = {"every core": ([AKSGPU, *args], {})}
        if sequential:
            variants["one after another"] = ([AKSGPU, *args], {"AKSGPU_WORKERS": "1"})
        if baseline is not None and base_project is not None:
            variants["baseline"] = ([baseline_aksgpu(baseline), *args], {}, base_project)
        times = interleaved(variants, project, rounds)
        line = f"  aksgpu {' '.join(args):<16} {times['every core']:6.1f} s on every core"
        if sequential:
            line += (f", {times['one after another']:.1f} s one stack after another: "
                     f"{times['every core'] / times['one after another']:.2f}x")
        if "baseline" in times:
            line += f"; baseline {times['baseline']:.1f} s: {times['every core'] / times['baseline']:.2f}x"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("members", nargs="*", type=int, help="fleet sizes (default 1 5 10 20; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="2 members and one round (CI runs it)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout with its own .venv, timed interleaved with this one")
    parser.add_argument("--every-core-only", action="store_true",
                        help="with --baseline: leave out the one-after-another runs and the table")
    options = parser.parse_args()
    main(options.members or ([2] if options.quick else [1, 5, 10, 20]), rounds=1 if options.quick else 3,
         baseline=options.baseline.resolve() if options.baseline else None, table=not options.every_core_only)
