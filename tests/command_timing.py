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


def timed(command: list[str], cwd: Path,
          env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False,
                            env={**os.environ, **(env or {})})
    return time.perf_counter() - started, result


def interleaved(variants: dict[str, tuple[list[str], dict[str, str]]], cwd: Path, rounds: int) -> dict[str, float]:
    """Median wall seconds of each variant (command, extra environment) over `rounds` interleaved
    rounds; fails when a variant's output or exit code differs from the first variant's."""
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    first: tuple[int, str, str] | None = None
    for _ in range(rounds):
        for name, (command, env) in variants.items():
            wall, result = timed(command, cwd, env)
            seconds[name].append(wall)
            seen = (result.returncode, result.stdout, result.stderr)
            if first is None:
                first = seen
            elif command[1:] == next(iter(variants.values()))[0][1:] and seen != first:
                raise SystemExit(f"{name}: output differs from {next(iter(variants))}'s")
    return {name: statistics.median(values) for name, values in seconds.items()}


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cores} cores, load average {load:.1f} at the start"
