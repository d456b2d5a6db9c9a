"""aksgpu's cross-node all-reduce measurement, one process per GPU under torchrun.

Measures what nccl-tests' all_reduce_perf reports for one message size (NVIDIA/nccl-tests v2.19.6
src/common.cu and doc/PERFORMANCE.md): float32 sum, `--iterations` back-to-back all-reduces after
warm-up, timed from a barrier to the last one's completion; algbw = bytes / time per all-reduce,
busbw = algbw * 2(n-1)/n; the slowest rank's time counts (nccl-tests' -a average would hide one
slow rank). Then a correctness pass like nccl-tests' #wrong: every rank contributes rank+1, every
element must come back as n(n+1)/2.

nccl-tests needs MPI to run on several nodes, which needs a launcher (ssh or an MPI operator) that
aksgpu does not install; torch.distributed's NCCL backend calls the same ncclAllReduce, started by
torchrun from an Indexed Job. PyTorch and the standard library only: it is shipped in a ConfigMap
and runs in any PyTorch image.

Rank 0 prints one line "aksgpu-fabric-acceptance {json}" and writes it to $AKSGPU_RESULT_FILE
(the container's termination message, which the acceptance pass reads from the pod's status).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

RESULT_PREFIX = "aksgpu-fabric-acceptance"


def bus_bandwidth(algorithm_bandwidth: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth (doc/PERFORMANCE.md): algbw * 2(n-1)/n."""
    return algorithm_bandwidth * 2 * (ranks - 1) / ranks


def measure(nbytes: int, iterations: int, warmup: int, backend: str, timeout_seconds: float) -> dict[str, object]:
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_seconds))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        cuda = backend == "nccl"
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        nodes = _gather_names(torch, dist, os.environ.get("NODE_NAME") or os.uname().nodename, world, device)
        # Zeros: repeated in-place sums stay exact and never overflow.
        tensor = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize(device)
        dist.barrier()
        begin = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - begin], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        del tensor
        check = torch.full((1 << 20,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(check)
        wrong = torch.tensor([int((check != world * (world + 1) / 2).sum().item())], device=device)
        dist.all_reduce(wrong)
        seconds = float(elapsed.item()) / iterations
        algbw = nbytes / seconds / 1e9
        return {"rank": rank, "ranks": world, "bytes": nbytes, "iterations": iterations,
                "secondsPerAllReduce": round(seconds, 6), "algbwGBs": round(algbw, 2),
                "busbwGBs": round(bus_bandwidth(algbw, world), 2), "wrong": int(wrong.item()),
                "nodes": list(dict.fromkeys(str(node) for node in nodes))}
    finally:
        dist.destroy_process_group()


NAME_BYTES = 256  # a Kubernetes node name is at most 253 characters


def _gather_names(torch: object, dist: object, name: str, world: int, device: object) -> list[str]:
    """Every rank's node name, in rank order (as fixed-size byte tensors: all_gather_object needs NumPy)."""
    encoded = list(name.encode()[:NAME_BYTES].ljust(NAME_BYTES, b"\0"))
    mine = torch.tensor(encoded, dtype=torch.uint8, device=device)  # type: ignore[attr-defined]
    gathered = [torch.zeros(NAME_BYTES, dtype=torch.uint8, device=device)  # type: ignore[attr-defined]
                for _ in range(world)]
    dist.all_gather(gathered, mine)  # type: ignore[attr-defined]
    return [bytes(tensor.cpu().tolist()).rstrip(b"\0").decode() for tensor in gathered]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fabric_allreduce.py", description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, required=True, help="message size per rank, in bytes")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"], help="gloo: CPU, for tests")
    parser.add_argument("--timeout-seconds", type=float, default=600)
    args = parser.parse_args(argv)
    result = measure(args.bytes, args.iterations, args.warmup, args.backend, args.timeout_seconds)
    if result.pop("rank") != 0:
        return 0
    line = f"{RESULT_PREFIX} {json.dumps(result, sort_keys=True, separators=(',', ':'))}"
    print(line, flush=True)
    target = os.environ.get("AKSGPU_RESULT_FILE")
    if target:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
