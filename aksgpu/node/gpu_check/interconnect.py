"""Interconnect checks on a multi-GPU node: intra-node NCCL all-reduce bus bandwidth, peer-to-peer
reachability between every GPU pair, and InfiniBand port state and rate."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from aksgpu.node.gpu_check.results import CheckResult, Verdict


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


# What the kernel writes in /sys/class/infiniband/<device>/ports/<n>/ (Documentation/ABI/stable/
# sysfs-class-infiniband; the formats are drivers/infiniband/core/sysfs.c's): state "%d: %s" (4: ACTIVE),
# phys_state "%u: %s" (5: LinkUp), rate "%d%s Gb/sec (%dX%s)" ("400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)"),
# link_layer "InfiniBand", "Ethernet" or "Unknown".
PORT_ACTIVE = 4
PHYS_LINK_UP = 5
INFINIBAND_LINK_LAYER = "InfiniBand"


def _numbered(text: str) -> tuple[int | None, str]:
    """A sysfs "N: NAME" value as (N, NAME); (None, text) when it is not one."""
    number, _, name = text.partition(":")
    try:
        return int(number.strip()), name.strip()
    except ValueError:
        return None, text


def _rate_gbps(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def infiniband_hcas(sysfs: Path) -> dict[str, list[Path]]:
    """Device -> its InfiniBand ports, for the devices of /sys/class/infiniband with at least one port
    whose link layer is InfiniBand. Azure's accelerated-networking VF is an mlx5 device too, with an
    Ethernet port (mlx5_8 in Azure's AKS RDMA test; names follow enumeration order, so the link layer
    decides, not the name; data/fabric.yaml ncclIbHca): it is not an InfiniBand HCA. A port
    without a link_layer file (kernels before 2.6.37) counts as InfiniBand."""
    hcas: dict[str, list[Path]] = {}
    for port in sorted(sysfs.glob("*/ports/*")) if sysfs.is_dir() else []:
        layer = _read(port / "link_layer")
        if layer in ("", INFINIBAND_LINK_LAYER):
            hcas.setdefault(port.parent.parent.name, []).append(port)
    return hcas


def infiniband_checks(sysfs: Path, expected_gbps: float | None, expected_hcas: int | None = None) -> list[CheckResult]:
    """Each InfiniBand port is ACTIVE (state 4) with its physical link up (phys_state 5, LinkUp), at
    least at the rate the VM size promises, and the node has the VM size's number of InfiniBand HCAs
    (/sys/class/infiniband/<device>/ports/<n>/{link_layer,state,phys_state,rate})."""
    hcas = infiniband_hcas(sysfs)
    infiniband_size = bool(expected_gbps or expected_hcas)
    if not hcas:
        if infiniband_size:
            return [CheckResult("infiniband", "fail", f"no InfiniBand ports under {sysfs}, and the VM size has "
                                + (f"{expected_gbps:g} Gb/s " if expected_gbps else "") + "InfiniBand",
                                value=0, threshold=expected_hcas)]
        return [CheckResult("infiniband", "skip", "no InfiniBand on this node")]
    results = []
    if expected_hcas is not None:
        found = len(hcas)
        verdict: Verdict = "fail" if found < expected_hcas else "warn" if found > expected_hcas else "pass"
        results.append(CheckResult("infiniband-hcas", verdict,
                                   f"{found} InfiniBand HCAs ({', '.join(sorted(hcas))}); "
                                   f"the VM size has {expected_hcas}",
                                   value=found, threshold=expected_hcas, unit="HCAs"))
    for device, ports in sorted(hcas.items()):
        for port in ports:
            name = f"{device}/{port.name}"
            state_text, physical_text, rate_text = (_read(port / "state"), _read(port / "phys_state"),
                                                    _read(port / "rate"))
            state, physical, rate = _numbered(state_text)[0], _numbered(physical_text)[0], _rate_gbps(rate_text)
            problems = []
            if state != PORT_ACTIVE:
                problems.append(f"state {state_text or 'unknown'}, not 4: ACTIVE")
            if physical != PHYS_LINK_UP:
                problems.append(f"physical state {physical_text or 'unknown'}, not 5: LinkUp")
            if expected_gbps and (rate is None or rate < expected_gbps):
                problems.append(f"rate {rate_text or 'unknown'} below {expected_gbps:g} Gb/s")
            results.append(CheckResult("infiniband", "fail" if problems else "pass",
                                       f"{name}: "
                                       + ("; ".join(problems) if problems else f"ACTIVE, LinkUp, {rate_text}"),
                                       value=rate or 0.0, threshold=expected_gbps, unit="Gb/s", details={"port": name}))
    return results


def rdma_device_checks(sysfs: Path, dev_dir: Path, verbs_sysfs: Path, expected_hcas: int | None) -> list[CheckResult]:
    """On an InfiniBand size, the RDMA devices are visible to this pod: a verbs device
    (/dev/infiniband/uverbsN) for every InfiniBand HCA and /dev/infiniband/rdma_cm. The RDMA shared
    device plugin mounts them into a container that requests its resource: per HCA its uverbs, umad
    and issm devices, and rdma_cm (Mellanox/k8s-rdma-shared-dev-plugin pkg/utils GetRdmaDevices,
    Mellanox/rdmamap GetRdmaCharDevices; requiredRdmaDevices rdma_cm, umad, uverbs). Which HCA a
    uverbsN serves is /sys/class/infiniband_verbs/uverbsN/ibdev (sysfs-class-infiniband)."""
    if expected_hcas is None:
        return []
    hcas = set(infiniband_hcas(sysfs))
    verbs = sorted(dev_dir.glob("uverbs*")) if dev_dir.is_dir() else []
    owners = {device.name: _read(verbs_sysfs / device.name / "ibdev") for device in verbs}
    missing: list[str] = []
    if hcas and owners and all(owners.values()):
        served = {owner for owner in owners.values() if owner in hcas}
        missing = sorted(hcas - served)
        visible = len(served)
    else:  # which HCA a device serves is unknown: count them
        visible = len(verbs)
    problems = []
    if visible < expected_hcas:
        problems.append(f"{visible} verbs devices under {dev_dir} for {expected_hcas} InfiniBand HCAs"
                        + (f" (none for {', '.join(missing)})" if missing else ""))
    if not (dev_dir / "rdma_cm").exists():
        problems.append(f"no {dev_dir / 'rdma_cm'}")
    reason = ("; ".join(problems) + ": the pod does not get the RDMA devices (is the RDMA shared device plugin "
              "running on the node, and does the pod request its resource?)") if problems else (
        f"{visible} verbs devices and rdma_cm under {dev_dir}")
    return [CheckResult("rdma-devices", "fail" if problems else "pass", reason, value=visible,
                        threshold=expected_hcas, unit="devices")]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
