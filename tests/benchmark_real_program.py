"""Benchmark (not part of the test run): what a real `pulumi preview` of aksgpu's program costs in
Python, before the engine does anything, with alias URNs deferred (aksgpu/program/alias_urns.py) and
without (AKSGPU_EAGER_ALIAS_URNS=1, the SDK as shipped), side by side.

Run: .venv/bin/python tests/benchmark_real_program.py

Each figure runs tests/registrations.py in a fresh process: the real program, aliases and all,
under Pulumi's mock monitor, which answers at once and reports alias-spec support as current
engines do, so the time is the program's own. "program (s)" is its wall time from the program's
start (imports of aksgpu and the provider SDKs included) to the last registration; "process (s)"
adds Python's start-up; peak RSS is the process's. Best of five runs, the two modes taking turns.
Stacks: the examples (dev, prod), each preset as `aksgpu init` would start it, and generated specs
of 10, 50 and 100 pools (tests/benchmark_plan.py's generated_spec).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_plan import generated_spec

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gpu-clusters"
RECORD = REPO / "tests" / "registrations.py"
AKSGPU = str(Path(sys.executable).with_name("aksgpu"))
RUNS = 5


def run_once(stack: Path, eager: bool, project: Path) -> tuple[float, float, float, int]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    try:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, str(RECORD), str(stack), str(out), *(["--eager"] if eager else [])],
                                   cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"{RECORD.name} failed for {stack} (eager={eager})")
        document = json.loads(out.read_text(encoding="utf-8"))
    finally:
        out.unlink(missing_ok=True)
    return document["seconds"], elapsed, usage.ru_maxrss / 1024, len(document["requests"])


def measure(stack: Path, project: Path) -> dict[bool, tuple[float, float, float, int]]:
    best: dict[bool, tuple[float, float, float, int]] = {}
    for _ in range(RUNS):
        for eager in (False, True):
            figures = run_once(stack, eager, project)
            if eager not in best or figures[0] < best[eager][0]:
                best[eager] = figures
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
        subprocess.run([AKSGPU, "init", preset, "--preset", preset, "--location", "eastus2", "--admin-group",
                        "11111111-1111-1111-1111-111111111111"], cwd=project, check=True, capture_output=True)
        stacks.append((f"preset {preset}", project / "stacks" / f"Pulumi.{preset}.yaml"))
    return stacks


def main() -> None:
    rows = []
    # Inside the example project, so the stack files find Pulumi.yaml and __main__.py above them.
    with tempfile.TemporaryDirectory(dir=EXAMPLE / "stacks") as scratch:
        folder = Path(scratch)
        cases = [(f"example {name}", EXAMPLE / "stacks" / f"Pulumi.{name}.yaml") for name in ("dev", "prod")]
        for pools in (10, 50, 100):
            path = folder / f"Pulumi.bench{pools}.yaml"
            path.write_text(yaml.safe_dump({"config": {"aksgpu:cluster": generated_spec(pools - 1, 5000 // pools)}}))
            cases.append((f"{pools} pools", path))
        rows += [(label, measure(stack, EXAMPLE)) for label, stack in cases]
    with tempfile.TemporaryDirectory() as scratch:
        rows += [(label, measure(stack, stack.parents[1])) for label, stack in preset_stacks(Path(scratch))]
    print_table(rows)


def print_table(rows: list[tuple[str, dict[bool, tuple[float, float, float, int]]]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(f"{'stack'.ljust(width)}  resources  deferred: program (s)  process (s)  RSS (MB)"
          f"   eager: program (s)  process (s)  RSS (MB)   eager/deferred")
    for label, best in rows:
        deferred, eager = best[False], best[True]
        print(f"{label.ljust(width)}  {deferred[3]:9d}  {deferred[0]:19.2f}  {deferred[1]:11.2f}  {deferred[2]:8.0f}"
              f"   {eager[0]:16.2f}  {eager[1]:11.2f}  {eager[2]:8.0f}   {eager[0] / deferred[0]:13.2f}x")
    import pulumi._version

    print(f"best of {RUNS} fresh processes each, the modes taking turns; pulumi {pulumi._version._VERSION}, "
          f"python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
