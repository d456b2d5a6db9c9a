"""Interleaved timing of aksgpu commands for the benchmarks (benchmark_validate.py, benchmark_fleet.py):
each round runs every variant once, in turn, so a busy spell slows all of them alike; a figure is
the median of its rounds, and the ratios compare variants measured in the same run."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

AKSGPU = str(Path(sys.executable).with_name("aksgpu"))


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    """The commands run as an installed aksgpu does: with Python's bytecode cache (a shell that sets
    PYTHONDONTWRITEBYTECODE=1 makes every start compile aksgpu's modules again, about 60 ms)."""
    inherited = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**inherited, **(env or {})}


def timed(command: list[str], cwd: Path,
          env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=_environment(env))
    return time.perf_counter() - started, result


Variant = tuple[list[str], dict[str, str]] | tuple[list[str], dict[str, str], Path]


def interleaved(variants: dict[str, Variant], cwd: Path, rounds: int) -> dict[str, float]:
    """Median wall seconds of each variant (command, extra environment, and a folder of its own
    where given: a baseline checkout's project) over `rounds` interleaved rounds; fails when a
    variant that runs the first variant's very command prints other output or exit code."""
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    first_command = next(iter(variants.values()))[0]
    first: tuple[int, str, str] | None = None
    for _ in range(rounds):
        for name, (command, env, *folder) in variants.items():
            wall, result = timed(command, folder[0] if folder else cwd, env)
            seconds[name].append(wall)
            seen = (result.returncode, result.stdout, result.stderr)
            if first is None:
                first = seen
            elif command == first_command and not folder and seen != first:
                raise SystemExit(f"{name}: output differs from {next(iter(variants))}'s")
    return {name: statistics.median(values) for name, values in seconds.items()}


def baseline_aksgpu(checkout: Path) -> str:
    """The console script of a baseline checkout (its own virtual environment, .venv)."""
    script = checkout / ".venv" / "bin" / "aksgpu"
    if not script.exists():
        raise SystemExit(f"{script} does not exist: give --baseline a checkout with its own .venv (git worktree "
                         "add DIR COMMIT; python3.11 -m venv DIR/.venv; DIR/.venv/bin/pip install -e DIR)")
    return str(script)


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cores} cores, load average {load:.1f} at the start"
