"""Interconnect checks on a multi-GPU node: intra-node NCCL all-reduce bus bandwidth, peer-to-peer
reachability between every GPU pair, and InfiniBand port state and rate."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from aksgpu.components.kubernetes.gpu_check.results import CheckResult


def bus_bandwidth(algorithm_bandwidth: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw * 2(n-1)/n, comparable across rank counts
    (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""
    return algorithm_bandwidth * 2 * (ranks - 1) / ranks


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _allreduce_worker(rank: int, world: int, port: int, nbytes: int, iters: int, warmup: int, backend: str,
                      results: Any, timeout_seconds: float) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_seconds))
    try:
        cuda = backend == "nccl"
        # One rank per GPU in the check (world = the GPUs); a benchmark may map more ranks than GPUs
        # (tests/benchmark_gpu_check_memory.py --workers), which NCCL accepts only from 2.30.3 with
        # NCCL_MULTI_RANK_GPU_ENABLE=1 (NVIDIA/nccl src/init.cc@v2.30.7-1; "Duplicate GPU detected" before).
        device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        dtype = torch.bfloat16 if cuda else torch.float32
        tensor = torch.ones(max(nbytes // torch.tensor([], dtype=dtype).element_size(), 1), dtype=dtype, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize(device)
        dist.barrier()
        begin = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - begin
        if rank == 0:
            results.put(tensor.numel() * tensor.element_size() * iters / seconds / 1e9)
    finally:
        dist.destroy_process_group()


def allreduce_bus_bandwidth_gbs(world: int, nbytes: int, iters: int = 20, warmup: int = 5,
                                backend: str = "nccl", timeout_seconds: float = 300.0) -> float:
    """Bus bandwidth of an all-reduce of `nbytes` across `world` local ranks, GB/s: NCCL on GPUs (one
    process per GPU), gloo on CPUs (the tests). A run that has not finished after
    `timeout_seconds` (a hung NVLink or NCCL) is stopped and raises TimeoutError."""
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    context = mp.start_processes(_allreduce_worker,
                                 args=(world, _free_port(), nbytes, iters, warmup, backend, results, timeout_seconds),
                                 nprocs=world, join=False, start_method="spawn")
    join_within(context, timeout_seconds)
    return bus_bandwidth(results.get(), world)


def join_within(context: Any, timeout_seconds: float) -> None:
    """Wait for torch.multiprocessing's spawned workers; past `timeout_seconds` kill those still
    alive and raise TimeoutError."""
    deadline = time.monotonic() + timeout_seconds
    while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):
        if time.monotonic() >= deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise TimeoutError(f"the all-reduce did not finish in {timeout_seconds:g} s")


def peer_checks(torch: Any, devices: list[Any]) -> list[CheckResult]:
    """Every GPU pair can reach each other peer-to-peer, and a copy between them arrives intact."""
    results = []
    for source in devices:
        for target in devices:
            if source == target:
                continue
            pair = f"{source.index}->{target.index}"
            if not torch.cuda.can_device_access_peer(source.index, target.index):
                results.append(CheckResult("p2p", "fail", f"GPU {pair}: no peer access", source.index,
                                           details={"pair": pair}))
                continue
            data = torch.arange(1 << 20, dtype=torch.int32, device=source)
            arrived = data.to(target).to(source)
            ok = bool(torch.equal(arrived, data))
            results.append(CheckResult("p2p", "pass" if ok else "fail",
                                       f"GPU {pair}: " + ("peer copy intact" if ok else "peer copy corrupted"),
                                       source.index, details={"pair": pair}))
    return results


def infiniband_checks(sysfs: Path, expected_gbps: float | None) -> list[CheckResult]:
    """Each InfiniBand port is ACTIVE with its physical link up, at the rate the VM size promises
    (/sys/class/infiniband/<device>/ports/<n>/{state,phys_state,rate})."""
    ports = sorted(sysfs.glob("*/ports/*")) if sysfs.is_dir() else []
    if not ports:
        if expected_gbps:
            return [CheckResult("infiniband", "fail", f"no InfiniBand ports under {sysfs}, and the VM size has "
                                f"{expected_gbps:g} Gb/s InfiniBand")]
        return [CheckResult("infiniband", "skip", "no InfiniBand on this node")]
    results = []
    for port in ports:
        name = f"{port.parent.parent.name}/{port.name}"
        state = _read(port / "state")
        physical = _read(port / "phys_state")
        rate_text = _read(port / "rate")
        try:
            rate = float(rate_text.split()[0])
        except (ValueError, IndexError):
            rate = 0.0
        problems = []
        if not state.endswith("ACTIVE"):
            problems.append(f"state {state or 'unknown'}")
        if not physical.endswith("LinkUp"):
            problems.append(f"physical state {physical or 'unknown'}")
        if expected_gbps and rate < expected_gbps:
            problems.append(f"rate {rate_text or 'unknown'} below {expected_gbps:g} Gb/s")
        results.append(CheckResult("infiniband", "fail" if problems else "pass",
                                   f"{name}: " + ("; ".join(problems) if problems else f"ACTIVE, {rate_text}"),
                                   value=rate, threshold=expected_gbps, unit="Gb/s", details={"port": name}))
    return results


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
