"""The measurements, with PyTorch: a large matrix multiply per GPU (TFLOPS), a device-to-device copy
(memory bandwidth, bytes read plus written) and a pattern write/read-back over most of the memory
free at the time (sized as it allocates, beside whatever else holds the GPU's memory).
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


@dataclass(frozen=True)
class PatternOutcome:
    """What the pattern test found: words that read back wrong, bytes covered, and the memory it had.
    free_bytes and total_bytes are the device's when the test began (None where unknown: the CPU);
    stopped says why it covered less than asked or broke off (memory ran short), None otherwise."""

    mismatched_words: int
    bytes_tested: int
    bytes_asked: int
    free_bytes: int | None = None
    total_bytes: int | None = None
    stopped: str | None = None


class TorchMemory:
    """A device's memory as the pattern test sees it: what is free now (the driver's figure, which
    counts every process on the GPU) and allocation. Tests replace it with a smaller device."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device

    def free_and_total(self) -> tuple[int, int] | None:
        if self.device.type != "cuda":
            return None
        free, total = self.torch.cuda.mem_get_info(self.device)
        return int(free), int(total)

    def allocate(self, count: int, dtype: Any) -> Any:
        return self.torch.empty(count, dtype=dtype, device=self.device)


def is_out_of_memory(torch: Any, error: BaseException) -> bool:
    """PyTorch's out-of-memory errors: torch.cuda.OutOfMemoryError (a RuntimeError), a CUDA error
    'out of memory' raised elsewhere, the CPU allocator's "can't allocate memory"."""
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if isinstance(oom, type) and isinstance(error, oom):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


# The test's work buffers hold this many words (64 MiB of int32): every temporary of the checks
# lives in them, so the test's memory beyond its chunks is fixed (13 bytes a word: an int64 index,
# an int32 expected word, a bool mask), 208 MiB, whatever the memory tested.
WORK_WORDS = 16 << 20
WORK_BYTES_PER_WORD = 8 + 4 + 1
# Smaller chunks than this, where free memory (less the headroom) allows no more, are not worth it.
MIN_CHUNK_BYTES = 64 << 20


def pattern_test(torch: Any, device: Any, nbytes: int, passes: int = 1, chunk_bytes: int = 1 << 30,
                 headroom_bytes: int = 0, memory: Any = None, work_words: int | None = None,
                 min_chunk_bytes: int | None = None) -> PatternOutcome:
    """Write patterns over up to `nbytes` of memory in chunks and read them back on the device.

    Each chunk is sized from the memory free when it is allocated, never leaving less than
    `headroom_bytes` free for the GPU's other processes; allocation stops cleanly when memory runs
    short (another process may hold or take most of it), and an out-of-memory error while reading
    back ends the test with what it found. Only words that read back wrong are a fault."""
    memory = memory or TorchMemory(torch, device)
    with _on(torch, device):
        _empty_cache(torch, device)  # memory this process cached counts as used in the driver's figure
        begun = memory.free_and_total()
        free, total = begun if begun is not None else (None, None)
        chunks: list[Any] = []
        stopped = None
        words_asked = max(nbytes // 4, 1)
        block = min(WORK_WORDS if work_words is None else work_words, words_asked)
        min_chunk_bytes = MIN_CHUNK_BYTES if min_chunk_bytes is None else min_chunk_bytes
        if free is not None and free - headroom_bytes < block * WORK_BYTES_PER_WORD + min(min_chunk_bytes, nbytes):
            return PatternOutcome(0, 0, nbytes, free, total, f"not run: {free / 2**30:.2f} GiB free, and "
                                  f"{headroom_bytes / 2**30:.2f} GiB stay free for the GPU's other processes")
        try:
            work = (memory.allocate(block, torch.int64), memory.allocate(block, torch.int32),
                    memory.allocate(block, torch.bool))
        except Exception as error:  # out of memory before anything was tested
            if not is_out_of_memory(torch, error):
                raise
            return PatternOutcome(0, 0, nbytes, free, total, f"no memory for the test's work buffers ({error})")
        words = words_asked
        while words > 0:
            count = min(max(chunk_bytes // 4, 1), words)
            now = memory.free_and_total()
            if now is not None:
                room = (now[0] - headroom_bytes) // 4
                if room < count:
                    if room * 4 < min_chunk_bytes:
                        stopped = (f"stopped allocating with {now[0] / 2**30:.2f} GiB free: "
                                   f"{headroom_bytes / 2**30:.2f} GiB stay free for the GPU's other processes")
                        break
                    count = room
            try:
                chunks.append(memory.allocate(count, torch.int32))
            except Exception as error:  # another process took the memory meanwhile
                if not is_out_of_memory(torch, error):
                    raise
                stopped = f"stopped allocating: out of memory ({_first_line(error)})"
                break
            words -= count
        mismatches = 0
        try:
            mismatches = _verify(torch, device, chunks, passes, work)
        except Exception as error:
            if not is_out_of_memory(torch, error):
                raise
            stopped = f"broke off reading back: out of memory ({_first_line(error)})"
            mismatches = getattr(error, "mismatches_so_far", 0)
        covered = sum(chunk.numel() * 4 for chunk in chunks)
        del chunks, work
        _empty_cache(torch, device)
        return PatternOutcome(mismatches, covered, nbytes, free, total, stopped)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _verify(torch: Any, device: Any, chunks: list[Any], passes: int, work: tuple[Any, Any, Any]) -> int:
    """Words that read back wrong over `passes` passes of every pattern, computed block by block in
    the work buffers (so no temporary grows with the memory tested)."""
    index, expected, mask = work
    block = mask.numel()
    found = torch.zeros((), dtype=torch.int64, device=device)

    def compare(chunk: Any, want: Any) -> None:
        for begin in range(0, chunk.numel(), block):
            end = min(begin + block, chunk.numel())
            torch.ne(chunk[begin:end], want if isinstance(want, int) else want(begin, end), out=mask[:end - begin])
            found.add_(mask[:end - begin].sum())

    def indices(start: int) -> Any:
        """Each word's index across all chunks, wrapped to int32 (unique below 16 GiB per run of 2^32
        words): two chunks that alias one another read back each other's indices."""
        def block_of(begin: int, end: int) -> Any:
            values = index[:end - begin]
            torch.arange(start + begin, start + end, out=values)
            values.add_(2**31).remainder_(2**32).sub_(2**31)
            out = expected[:end - begin]
            out.copy_(values)
            return out
        return block_of

    try:
        for _ in range(passes):
            for pattern in PATTERNS:
                for chunk in chunks:
                    chunk.fill_(pattern)
                for chunk in chunks:
                    compare(chunk, pattern)
            for chunk, start in zip(chunks, _starts(chunks), strict=True):
                write = indices(start)
                for begin in range(0, chunk.numel(), block):
                    end = min(begin + block, chunk.numel())
                    chunk[begin:end].copy_(write(begin, end))
            for chunk, start in zip(chunks, _starts(chunks), strict=True):
                compare(chunk, indices(start))
        return int(found.item())
    except Exception as error:
        try:
            error.mismatches_so_far = int(found.item())  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001, S110 - the device may be past reading; the error says why
            pass
        raise


def _starts(chunks: list[Any]) -> list[int]:
    starts, offset = [], 0
    for chunk in chunks:
        starts.append(offset)
        offset += chunk.numel()
    return starts


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
