"""Benchmark (not part of the test run): what a real `pulumi preview` of aksgpu's program costs in
Python, before the engine does anything: with alias URNs deferred (aksgpu/program/alias_urns.py,
what a preview runs), against the same program with every alias dropped (as the offline plan
does: the floor the aliases cost is measured against) and with the SDK's eager alias URNs
(AKSGPU_EAGER_ALIAS_URNS=1, the SDK as shipped), the modes taking turns.

Run: .venv/bin/python tests/benchmark_real_program.py [--quick] [--no-eager]

Each figure runs tests/registrations.py in a fresh process: the real program, aliases and all,
under Pulumi's mock monitor, which answers at once and reports alias-spec support as current
engines do, so the time is the program's own, with the garbage collector on as in a real preview.
"program (s)" is its wall time from the program's start (imports of aksgpu and the provider SDKs
included) to the last registration; "cpu (s)" the process's CPU time (steadier on a shared
machine); peak RSS is the process's. Best of three runs. Stacks: the examples (dev, prod), each
preset as `aksgpu init` would start it, and generated specs of 10, 50 and 100 pools
(tests/benchmark_plan.py's generated_spec). --quick: the 10-pool stack, deferred and dropped,
one run each (a few seconds; tests/test_benchmarks.py runs it). --no-eager leaves the slow eager
mode out. A failed run ends the benchmark with its output and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_plan import EXAMPLE, POOLS, scratch_project, write_generated_stack

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "registrations.py"
AKSGPU = str(Path(sys.executable).with_name("aksgpu"))
RUNS = 3
# Mode -> registrations.py's flags.
MODES = {"deferred": [], "dropped": ["--drop-aliases"], "eager": ["--eager"]}
# program (s), cpu (s), peak RSS (MB), requests
Figures = tuple[float, float, float, int]


def run_once(stack: Path, mode: str, project: Path) -> Figures:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    try:
        process = subprocess.Popen([sys.executable, str(RECORD), str(stack), str(out), *MODES[mode]],
                                   cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert process.stderr is not None
        stderr = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise SystemExit(f"benchmark failed: {RECORD.name} {stack} ({mode}) exited with status "
                             f"{os.waitstatus_to_exitcode(status)}:\n{stderr.decode(errors='replace')[-4000:]}")
        document = json.loads(out.read_text(encoding="utf-8"))
    finally:
        out.unlink(missing_ok=True)
    return document["seconds"], usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, len(document["requests"])


def measure(stack: Path, project: Path, modes: list[str], runs: int) -> dict[str, Figures]:
    best: dict[str, Figures] = {}
    for _ in range(runs):
        for mode in modes:
            figures = run_once(stack, mode, project)
            if mode not in best or figures[0] < best[mode][0]:
                best[mode] = figures
    return best


def preset_stacks(folder: Path) -> list[tuple[str, Path]]:
    """Each preset as `aksgpu init` starts it, rendered by aksgpu into a scratch project."""
    from aksgpu.environments.presets import preset_names

    project = folder / "presets"
    (project / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        (project / name).write_text((EXAMPLE / name).read_text())
    stacks = []
    for preset in preset_names():
        result = subprocess.run([AKSGPU, "init", preset, "--preset", preset, "--location", "eastus2", "--admin-group",
                                 "11111111-1111-1111-1111-111111111111"], cwd=project, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"benchmark failed: aksgpu init {preset}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        stacks.append((f"preset {preset}", project / "stacks" / f"Pulumi.{preset}.yaml"))
    return stacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 10-pool stack, deferred and dropped, one run each")
    parser.add_argument("--no-eager", action="store_true", help="leave the SDK's eager alias URNs out")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of each mode (default {RUNS})")
    options = parser.parse_args()
    modes = ["deferred", "dropped"] if options.quick or options.no_eager else list(MODES)
    runs = 1 if options.quick else options.runs
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        project = scratch_project(Path(scratch))
        cases = [] if options.quick else [(f"example {name}", project / "stacks" / f"Pulumi.{name}.yaml")
                                          for name in ("dev", "prod")]
        cases += [(f"{pools} pools", write_generated_stack(project, pools)) for pools in (POOLS[:1] if options.quick
                                                                                           else POOLS)]
        rows += [(label, measure(stack, project, modes, runs)) for label, stack in cases]
        if not options.quick:
            rows += [(label, measure(stack, stack.parents[1], modes, runs))
                     for label, stack in preset_stacks(Path(scratch))]
    print_table(rows, modes)
    print(f"best of {runs} fresh processes each, the modes taking turns, the collector on; "
          f"pulumi {_pulumi_version()}, python {sys.version.split()[0]}")


def print_table(rows: list[tuple[str, dict[str, Figures]]], modes: list[str]) -> None:
    width = max(len(label) for label, _ in rows)
    header = f"{'stack'.ljust(width)}  resources"
    for mode in modes:
        header += f"   {mode}: program (s)  cpu (s)  RSS (MB)"
    print(header + "   deferred/dropped (cpu)" + ("   eager/deferred" if "eager" in modes else ""))
    for label, best in rows:
        line = f"{label.ljust(width)}  {best['deferred'][3]:9d}"
        for mode in modes:
            program, cpu, rss, _ = best[mode]
            line += f"   {program:{len(mode) + 13}.2f}  {cpu:7.2f}  {rss:8.0f}"
        deferred, dropped = best["deferred"], best["dropped"]
        line += f"   {deferred[0] / dropped[0]:15.2f}x ({deferred[1] / dropped[1]:.2f}x)"
        if "eager" in modes:
            line += f"   {best['eager'][0] / best['deferred'][0]:13.2f}x"
        print(line)


def _pulumi_version() -> str:
    import pulumi._version

    return str(pulumi._version._VERSION)


if __name__ == "__main__":
    main()
