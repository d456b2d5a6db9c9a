"""Peak host memory of aksgpu's GPU check with N all-reduce workers (figures, not a test): what the
gate's check container must hold (its memory limit, gpu_gate.py check_resources).

    python3 tests/benchmark_gpu_check_memory.py [--workers N] [--expected FILE.yaml] [--expect N=P,W,S ...]
    python3 tests/benchmark_gpu_check_memory.py --cpu --workers 2     # anywhere: gloo on CPU processes

For N = 1 .. the GPUs (or --workers), as the check runs: the parent process first multiplies on
GPUs 0..N-1 (a CUDA context and cuBLAS on each, as after its GEMM phase), then, for N >= 2, spawns
N all-reduce workers with the check's own worker (gpu_check/interconnect.py _allreduce_worker:
PyTorch, a CUDA context, NCCL, the message). While they run it samples every process's
/proc/<pid>/smaps_rollup, the size used in /dev/shm and the memory cgroup's memory.current, and
prints, one JSON object a line:
  {"what": "process", ...}  the parent and each worker at its peak: USS (private pages), PSS (shared
                            pages split among their users), RSS (shared pages counted in full)
  {"what": "total", ...}    at the sample where the processes held most together: the sums. What a
                            memory cgroup charges for these processes is about the sum of PSS (each
                            shared page once); cgroupPeakGib is the cgroup's own figure where
                            readable (it also counts page cache and the tmpfs in /dev/shm); shmMib
                            is what the run added to /dev/shm
  {"what": "expected", ...} each figure against the table: parent GiB, per-worker GiB (the largest
                            worker), shm MiB, measured with --figure (rss by default: the gate's
                            sizing table, catalog/gpu_gate.yaml, uses RSS)
Expectations come from --expected (YAML: {N: {parentGib, workerGib, shmMib}}), --expect N=P,W,S, or
else, on GPUs, the gate's own sizing table (gpu_gate.yaml checkMemory). Exit 0 when every figure is
within its expectation (or none was given), 1 when one is over, 2 when it cannot run here.

--workers above the GPU count maps several ranks to one GPU (rank % GPUs). NCCL refuses that before
2.30.3 ("Duplicate GPU detected", NVIDIA/nccl src/init.cc@v2.28.3-1) and from 2.30.3 allows it only
with NCCL_MULTI_RANK_GPU_ENABLE=1 (src/init.cc@v2.30.7-1), which this script then sets; with an
older NCCL it measures up to the GPU count and says why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aksgpu.node.gpu_check import interconnect, measure

GIB = 2**30
MIB = 2**20
NCCL_MULTI_RANK = (2, 30, 3)


def memory_of(pid: int | str) -> dict[str, int] | None:
    """USS, PSS and RSS of a process in bytes, from /proc/<pid>/smaps_rollup; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii")
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024  # kB
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0) + fields.get("Private_Hugetlb", 0)
    return {"uss": private, "pss": fields.get("Pss", 0), "rss": fields.get("Rss", 0)}


def shm_used(path: str = "/dev/shm") -> int:
    try:
        stats = os.statvfs(path)
    except OSError:
        return 0
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def cgroup_file(name: str) -> Path | None:
    """A file of this process's cgroup v2 memory controller (memory.current, memory.peak), if readable."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            candidate = Path("/sys/fs/cgroup") / line[3:].lstrip("/") / name
            return candidate if candidate.is_file() else None
    return None


def read_bytes(path: Path | None) -> int | None:
    try:
        return int(path.read_text().strip()) if path else None
    except (OSError, ValueError):
        return None


@dataclass
class Sampler:
    """Samples the parent, the workers (by pid, rank order), /dev/shm and the cgroup until stopped."""

    workers: list[int]
    interval: float = 0.01
    peaks: dict[int, dict[str, int]] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    shm_peak: int = 0
    cgroup_peak: int | None = None

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.current = cgroup_file("memory.current")
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self) -> None:
        pids = [os.getpid(), *self.workers]
        together = {"uss": 0, "pss": 0, "rss": 0}
        for pid in pids:
            figures = memory_of(pid)
            if figures is None:
                continue
            peak = self.peaks.setdefault(pid, dict.fromkeys(figures, 0))
            for key, value in figures.items():
                peak[key] = max(peak[key], value)
                together[key] += value
        if together["uss"] >= self.total.get("uss", -1):
            self.total = together
        self.shm_peak = max(self.shm_peak, shm_used())
        current = read_bytes(self.current)
        if current is not None:
            self.cgroup_peak = max(self.cgroup_peak or 0, current)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.sample()


def run_allreduce(world: int, nbytes: int, backend: str, timeout: float, sampler_interval: float) -> Sampler:
    """The check's all-reduce (interconnect.allreduce_bus_bandwidth_gbs launches the same worker the
    same way), sampled while it runs."""
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    context = mp.start_processes(interconnect._allreduce_worker,
                                 args=(world, interconnect._free_port(), nbytes, 20, 5, backend, results, timeout),
                                 nprocs=world, join=False, start_method="spawn")
    sampler = Sampler([process.pid for process in context.processes], sampler_interval)
    with sampler:
        interconnect.join_within(context, timeout)
    return sampler


def expectations(args: argparse.Namespace, cpu: bool) -> dict[int, dict[str, float]]:
    """{N: {parentGib, workerGib, shmMib}} from --expected, --expect, or the gate's sizing table."""
    table: dict[int, dict[str, float]] = {}
    if args.expected:
        import yaml

        loaded = yaml.safe_load(Path(args.expected).read_text(encoding="utf-8")) or {}
        table |= {int(count): {key: float(value) for key, value in figures.items()}
                  for count, figures in loaded.items()}
    for item in args.expect or []:
        count, _, figures = item.partition("=")
        parent, worker, shm = (float(value) for value in figures.split(","))
        table[int(count)] = {"parentGib": parent, "workerGib": worker, "shmMib": shm}
    if table or cpu:
        return table
    try:
        from aksgpu import catalog

        sizing = catalog.load("gpu_gate")["checkMemory"]
    except (OSError, KeyError):
        return {}
    return {count: {"parentGib": sizing["parentGib"] + (count - 1) * sizing["parentContextPerGpuGib"],
                    "workerGib": sizing["workerRssGib"] if count > 1 else 0.0,
                    "shmMib": sizing["sharedMemoryGib"] * 1024} for count in range(1, args.max_count + 1)}


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--cpu", action="store_true", help="gloo on CPU processes (no GPU needed)")
    cli.add_argument("--workers", type=int, help="the most workers to measure (default: the GPU count; 2 with --cpu)")
    cli.add_argument("--message-bytes", type=int, help="all-reduce message (default 512 MiB on GPUs, 1 MiB on CPU)")
    cli.add_argument("--expected", help="YAML {N: {parentGib, workerGib, shmMib}}")
    cli.add_argument("--expect", action="append", metavar="N=PARENT_GIB,WORKER_GIB,SHM_MIB")
    cli.add_argument("--figure", choices=("rss", "pss", "uss"), default="rss", help="the figure held to the table")
    cli.add_argument("--timeout", type=float, default=300.0)
    cli.add_argument("--interval", type=float, default=0.01, help="sampling interval, seconds")
    args = cli.parse_args(argv)
    torch = measure.torch_module()
    if args.cpu:
        backend, gpus = "gloo", 0
        devices = [torch.device("cpu")]
        args.max_count = args.workers or 2
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU here: run with --cpu to measure the gloo path", file=sys.stderr)
            return 2
        backend, gpus = "nccl", torch.cuda.device_count()
        devices = measure.gpu_devices(torch)
        args.max_count = args.workers or gpus
        if args.max_count > gpus:
            version = tuple(torch.cuda.nccl.version())
            if version >= NCCL_MULTI_RANK:
                os.environ["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"  # inherited by the spawned workers
            else:
                emit({"what": "note", "reason": f"NCCL {'.'.join(map(str, version))} refuses two ranks on one GPU "
                      "(Duplicate GPU detected; NCCL_MULTI_RANK_GPU_ENABLE exists from 2.30.3): measuring up to "
                      f"{gpus} workers"})
                args.max_count = gpus
    nbytes = args.message_bytes or (1 << 20 if args.cpu else 512 << 20)
    table = expectations(args, args.cpu)
    shm_before = shm_used()
    over = False
    emit({"what": "machine", "backend": backend, "gpus": gpus, "torch": torch.__version__,
          "gpuName": torch.cuda.get_device_name(0) if gpus else None, "messageBytes": nbytes,
          "cgroup": str(cgroup_file("memory.current") or "") or None, "shmUsedMibBefore": round(shm_before / MIB, 1)})
    for count in range(1, args.max_count + 1):
        began = time.monotonic()
        # The parent as after its GEMM phase: a context (and cuBLAS) on every GPU the check measured.
        device = devices[min(count - 1, len(devices) - 1)] if gpus else devices[0]
        measure.gemm_tflops(torch, device, 8192 if gpus else 256, 20, 5)
        parent = memory_of(os.getpid()) or {}
        workers: list[dict[str, Any]] = []
        total = dict(parent)
        shm_added, cgroup_peak = 0, read_bytes(cgroup_file("memory.current"))
        if count > 1:
            sampler = run_allreduce(count, nbytes, backend, args.timeout, args.interval)
            parent = {key: max(value, sampler.peaks.get(os.getpid(), {}).get(key, 0)) for key, value in parent.items()}
            workers = [{"rank": rank, **sampler.peaks.get(pid, {})} for rank, pid in enumerate(sampler.workers)]
            total, shm_added, cgroup_peak = sampler.total, max(sampler.shm_peak - shm_before, 0), sampler.cgroup_peak
        emit({"what": "process", "workers": count, "process": "parent", **_gib(parent)})
        for worker in workers:
            emit({"what": "process", "workers": count, "process": "worker", "rank": worker["rank"], **_gib(worker)})
        emit({"what": "total", "workers": count, **_gib(total), "cgroupPeakGib": _round(cgroup_peak, GIB),
              "cgroupLifetimePeakGib": _round(read_bytes(cgroup_file("memory.peak")), GIB),
              "shmMib": round(shm_added / MIB, 3), "seconds": round(time.monotonic() - began, 2)})
        if count in table:
            measured = {"parentGib": parent.get(args.figure, 0) / GIB,
                        "workerGib": max((w.get(args.figure, 0) for w in workers), default=0) / GIB,
                        "shmMib": shm_added / MIB}
            for name, expected in table[count].items():
                within = measured[name] <= expected
                over |= not within
                emit({"what": "expected", "workers": count, "figure": name,
                      "measure": "dev/shm" if name == "shmMib" else args.figure,
                      "measured": round(measured[name], 3), "expected": expected, "within": within})
    return 1 if over else 0


def _round(value: int | None, unit: int) -> float | None:
    return None if value is None else round(value / unit, 3)


def _gib(figures: dict[str, Any]) -> dict[str, float]:
    return {f"{key}Gib": round(figures[key] / GIB, 3) for key in ("uss", "pss", "rss") if key in figures}


if __name__ == "__main__":
    sys.exit(main())
