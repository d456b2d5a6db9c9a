"""The measurements, with PyTorch: a large matrix multiply per GPU (TFLOPS), a device-to-device copy
(memory bandwidth, bytes read plus written) and a pattern write/read-back over most of free memory.
Every GPU runs at once, one thread each, so a node's GPUs are measured under the same load. The
same code runs on the CPU build of PyTorch at tiny sizes (the tests), timed by the wall clock there
and by CUDA events on a GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
# Patterns written over memory: alternating bits, their complement, all ones; then each word's own index,
# which catches addressing faults a constant cannot.
PATTERNS = (0x55555555, -0x55555556, -1)


@dataclass(frozen=True)
class Sizes:
    """How hard a level pushes: GEMM dimension and repetitions, copy size, share of free memory tested."""

    gemm_n: int
    gemm_iters: int
    warmup: int
    copy_bytes: int
    copy_iters: int
    pattern_fraction: float
    pattern_passes: int
    burn_seconds: float = 0.0


# Timed windows of a few hundred milliseconds after a warm-up that lets clocks settle: a 50-product
# window right after start read 5% low on an H100 (README, "GPU health check figures").
STANDARD = Sizes(gemm_n=8192, gemm_iters=200, warmup=20, copy_bytes=2 << 30, copy_iters=50, pattern_fraction=0.9,
                 pattern_passes=1)
FULL = Sizes(gemm_n=16384, gemm_iters=100, warmup=10, copy_bytes=4 << 30, copy_iters=50, pattern_fraction=0.95,
             pattern_passes=3, burn_seconds=300.0)


def torch_module() -> Any:
    import torch

    return torch


def gpu_devices(torch: Any) -> list[Any]:
    return [torch.device("cuda", index) for index in range(torch.cuda.device_count())]


def matmul_dtype(torch: Any, device: Any) -> Any:
    """BF16 where the GPU has it, else FP16; FP32 on the CPU (its BF16 path is slow and not what is measured)."""
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class Timer:
    """CUDA events on a GPU (the GPU's own clock, no host jitter), the wall clock on the CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device

    def __enter__(self) -> Timer:
        if self.device.type == "cuda":
            self.start, self.end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            self.begin = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.end.record()
            self.end.synchronize()
            self.seconds = self.start.elapsed_time(self.end) / 1000.0
        else:
            self.seconds = time.perf_counter() - self.begin


def gemm_tflops(torch: Any, device: Any, n: int, iters: int, warmup: int, burn_seconds: float = 0.0) -> float:
    """Dense matrix-multiply throughput of one GPU, TFLOPS (2*n^3 per product), after warm-up.
    With burn_seconds, products repeat that long first (heat, clocks settled), then are timed."""
    with _on(torch, device):
        dtype = matmul_dtype(torch, device)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        for _ in range(warmup):
            torch.matmul(a, b, out=out)
        deadline = time.monotonic() + burn_seconds
        while time.monotonic() < deadline:
            for _ in range(10):
                torch.matmul(a, b, out=out)
            _sync(torch, device)
        with Timer(torch, device) as timer:
            for _ in range(iters):
                torch.matmul(a, b, out=out)
        del a, b, out
        _empty_cache(torch, device)  # give the memory back, so the pattern test can cover it
        return 2.0 * n**3 * iters / timer.seconds / 1e12


def copy_bandwidth_tbs(torch: Any, device: Any, nbytes: int, iters: int, warmup: int) -> float:
    """Device memory bandwidth from device-to-device copies, TB/s, counting bytes read and written."""
    with _on(torch, device):
        source = torch.empty(nbytes, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        for _ in range(warmup):
            target.copy_(source)
        with Timer(torch, device) as timer:
            for _ in range(iters):
                target.copy_(source)
        del source, target
        _empty_cache(torch, device)
        return 2.0 * nbytes * iters / timer.seconds / 1e12


def pattern_test(torch: Any, device: Any, nbytes: int, passes: int = 1, chunk_bytes: int = 1 << 30) -> dict[str, int]:
    """Write patterns over `nbytes` of memory in chunks and read them back on the device: the number
    of words that came back different (0 on good memory), and the bytes covered."""
    chunk_words = max(chunk_bytes // 4, 1)
    words = max(nbytes // 4, 1)
    chunks = []
    with _on(torch, device):
        try:
            while words > 0:
                count = min(chunk_words, words)
                chunks.append(torch.empty(count, dtype=torch.int32, device=device))
                words -= count
        except RuntimeError:  # out of memory: test what was allocated
            pass
        mismatches = 0
        for _ in range(passes):
            for pattern in PATTERNS:
                for chunk in chunks:
                    chunk.fill_(pattern)
                for chunk in chunks:
                    mismatches += int((chunk != pattern).sum().item())
            # Each word gets its index across all chunks (int32, unique below 16 GiB per run of
            # 2^32 words): two chunks that alias one another read back each other's indices.
            for chunk, start in zip(chunks, _starts(chunks), strict=True):
                _index_pattern(torch, chunk, start, device, out=chunk)
            for chunk, start in zip(chunks, _starts(chunks), strict=True):
                expected = _index_pattern(torch, chunk, start, device)
                mismatches += int((chunk != expected).sum().item())
                del expected
        covered = sum(chunk.numel() * 4 for chunk in chunks)
        del chunks
        _empty_cache(torch, device)
        return {"mismatchedWords": mismatches, "bytesTested": covered}


def _starts(chunks: list[Any]) -> list[int]:
    starts, offset = [], 0
    for chunk in chunks:
        starts.append(offset)
        offset += chunk.numel()
    return starts


def _index_pattern(torch: Any, chunk: Any, start: int, device: Any, out: Any = None) -> Any:
    """Words start, start+1, ... of the run, wrapped to int32."""
    values = torch.arange(start, start + chunk.numel(), dtype=torch.int64, device=device)
    wrapped = ((values + 2**31) % 2**32 - 2**31).to(torch.int32)
    del values
    if out is None:
        return wrapped
    out.copy_(wrapped)
    del wrapped
    return out


def free_bytes(torch: Any, device: Any) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return 0


def on_every_gpu(devices: list[Any], measure: Callable[[Any], T],
                 timeout_seconds: float | None = None) -> dict[int, T | BaseException]:
    """Run `measure` on every device at once, one thread each (kernels release the GIL); a device
    whose measurement raised gets the exception, and one still running after `timeout_seconds`
    gets a TimeoutError (a hung GPU), so one bad GPU fails its own check only."""
    results: dict[int, T | BaseException] = {}

    def work(position: int, device: Any) -> None:
        try:
            results[position] = measure(device)
        except Exception as error:  # noqa: BLE001 - reported as that GPU's failure
            results[position] = error

    threads = [threading.Thread(target=work, args=(position, device), daemon=True)
               for position, device in enumerate(devices)]
    for thread in threads:
        thread.start()
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    for thread in threads:
        thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
    for position in range(len(devices)):
        if position not in results:
            results[position] = TimeoutError(f"still running after {timeout_seconds} s")
    return dict(sorted(results.items()))


class _on:
    """Make `device` current for this thread (CUDA), a no-op on the CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.context = torch.cuda.device(device) if device.type == "cuda" else None

    def __enter__(self) -> None:
        if self.context is not None:
            self.context.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.context is not None:
            self.context.__exit__(*exc)


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _empty_cache(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
