"""Offline plans on every core: a command that plans several stacks (`aksgpu validate`, `aksgpu ci
summary`, `aksgpu plan FLEET`) plans them ahead in worker processes, one per core, and then goes
through its stacks in its own order as before, finding each plan made (plan/review.py `Stacks`).

Only what the command itself would plan is planned ahead, with the same inputs, so every plan, line
and exit code is what planning one stack after another gives. A plan that fails in a worker is left
out: the command plans that stack itself when it gets to it and reports the error as it always did
(one message, never a traceback). Workers start with the planner, the program and the provider SDK
modules a plan declares (plan/preload.py) imported once for all of them: on Linux they are forked from
the command itself once it imported them, while it has no thread but its main one (nothing of gRPC,
asyncio or a thread pool runs before the fork; _forks_here); else (beside a thread: a terminal's
spinner, pytest-xdist) from a server process that imported them (multiprocessing's forkserver;
spawn where there is none). They sit in a process group of their
own, deaf to SIGINT: Ctrl-C at the terminal reaches only the command, which stops them and ends as it
always does (one line, exit 130).

AKSGPU_WORKERS=N sets how many workers (default: one per core, where each gets a few plans; 1: none,
every plan in the command's process, one after another).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aksgpu.plan.planner import Plan
    from aksgpu.project.stackfile import StackFile

WORKERS_VARIABLE = "AKSGPU_WORKERS"
# What the workers' parent (the command, or the server process) imports once, so that each worker
# forked from it starts with them.
PRELOAD = ["aksgpu.plan.planner", "aksgpu.program", "aksgpu.plan.preload"]

# Workers start with the provider SDK modules imported (PRELOAD, about a second here, which the
# command's own process would pay once too), but forking them, and their first plan in a forked
# process, still cost more than a plan of the example (0.15 to 0.3 s): with fewer plans than this per
# worker, one after another in the command's process is faster (the two-environment example's
# `ci summary` on 2 workers took 1.4x as long, a 2-member fleet's `validate` 1.1x, measured
# interleaved on 2026-11-27 on this busy 2-core machine; tests/benchmark_validate.py, benchmark_fleet.py).
PLANS_PER_WORKER = 3

Job = tuple["StackFile", "str | None", "Mapping[str, Mapping[str, Any]]"]
Progress = Callable[[int, int], None]  # (plans done, plans in all)


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def worker_count(jobs: int) -> int:
    """How many workers `jobs` plans get: one per core with at least PLANS_PER_WORKER plans each
    (AKSGPU_WORKERS=N: N, at most one per plan); 0, plan in this process, where that is under two."""
    setting = os.environ.get(WORKERS_VARIABLE, "").strip()
    if setting.isdigit() and int(setting) > 0:
        count = min(int(setting), jobs)
    else:
        count = min(cores(), jobs // PLANS_PER_WORKER)
    return count if count > 1 else 0


@contextlib.contextmanager
def _no_interrupt_while_starting() -> Iterator[None]:
    """Processes started meanwhile (the server, the workers) begin deaf to SIGINT, which is what they
    inherit across exec and fork (a signal mask is not, through multiprocessing), so that a Ctrl-C
    while they start prints no traceback of theirs. For the milliseconds this lasts, Ctrl-C is missed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_worker() -> None:
    """In each worker: out of the terminal's process group and deaf to SIGINT (a Ctrl-C is the
    command's to handle: it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "setpgid"):
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)


def _plan(stack_file: StackFile, project: str | None, stack_outputs: Mapping[str, Mapping[str, Any]]) -> Plan | None:
    """One plan in a worker; None when it fails (the command then plans the stack itself and says why)."""
    from aksgpu.plan.planner import plan_stack

    try:
        return plan_stack(stack_file, project, stack_outputs)
    except Exception:  # noqa: BLE001 - the command's own plan of this stack reports it
        return None


def warm_up(jobs: int) -> None:
    """Start the server the workers are forked from, so that it imports the planner, the program and
    the SDK modules while the command does its own work first (validating, rendering); nothing where
    `jobs`, the plans the command expects to make, stay in this process, or where the workers will be
    forked from this process (_forks_here) or there is no forkserver. On a terminal the command shows
    a spinner while it plans (cli/console.py progress), whose thread rules out forking from it then."""
    if worker_count(jobs) and (not _forks_here() or sys.stderr.isatty()):
        _context()


def os_threads() -> int:
    """The threads of this process as the kernel counts them (a C library's too, which threading
    does not see: gRPC's, say); threading's count where there is no /proc."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _forks_here() -> bool:
    """Whether the workers are forked from this process: on Linux, while it has no thread but its
    main one (a child forked beside another thread may inherit a lock that thread held, forever).
    Elsewhere, or beside threads (pytest-xdist's, a command that started one), a forkserver does."""
    return (sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()
            and threading.current_thread() is threading.main_thread() and os_threads() == 1)


def _fork_context() -> Any:
    """fork's context, with the planner, the program and the provider SDK modules (plan/preload.py)
    imported here first, once, so that every worker forked from this process plans without importing
    them; None where this process may not fork (an import started a thread: _forks_here)."""
    for name in PRELOAD:
        importlib.import_module(name)
    return multiprocessing.get_context("fork") if _forks_here() else None


def _context() -> Any:
    """The forkserver context, its server started (deaf to SIGINT, which the workers it forks
    inherit); or spawn's, where there is no forkserver."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with _no_interrupt_while_starting():
        forkserver.ensure_running()  # returns at once; the server imports PRELOAD on its own
    return context


class Workers:
    """The plan workers of one command, started with the first plan given them; close() stops them."""

    def __init__(self, jobs: int) -> None:
        """`jobs`: how many plans the command may give them, which bounds how many workers start."""
        self.count = worker_count(jobs)
        self._pool: ProcessPoolExecutor | None = None
        self._forked = False

    def submit(self, job: Job) -> Future[Plan | None]:
        """Plan `job` (stack file, project, the outputs its stack references read) on a worker."""
        if self._pool is None:
            context = (_forks_here() and _fork_context()) or _context()
            self._forked = context.get_start_method() == "forkserver"
            self._pool = ProcessPoolExecutor(max_workers=self.count, mp_context=context, initializer=_start_worker)
        if self._forked:
            return self._pool.submit(_plan, *job)  # its workers start deaf to SIGINT, as the server is
        # fork (all workers at the first job, before the pool's own thread starts) or spawn: they
        # start from this process.
        with _no_interrupt_while_starting():
            return self._pool.submit(_plan, *job)

    def close(self, stop: bool = False) -> None:
        """Shut the workers down; `stop`: end them now, plans half made or not (Ctrl-C)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=not stop, cancel_futures=True)
        if stop:
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=5)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(stop=exc_info[0] is not None)


def plan_ahead(jobs: Sequence[Job | Callable[[], Job | None]], after: Sequence[int | None],
               keep: Callable[[int, Plan], None], progress: Progress | None = None) -> None:
    """Plan `jobs` on the workers, as many at once as there are workers. Job i waits for the plan of
    job after[i] when that is not None (a fleet member for its shared stack's plan): it is then a
    function that gives the job, with the outputs of the stacks it references, once that plan was
    kept (None: skip it). `keep(i, plan)` gets each plan made; a job that failed, and the jobs that
    wait for it, are skipped. `progress(done, all)` is called as plans finish. Ctrl-C stops the
    workers and raises KeyboardInterrupt."""
    waiting: dict[int, list[int]] = {}
    for index, before in enumerate(after):
        if before is not None:
            waiting.setdefault(before, []).append(index)
    try:
        _plan_ahead(jobs, after, waiting, keep, progress)
    except (OSError, RuntimeError, BrokenProcessPool):  # workers that cannot start or died: plan in this process
        return


def _plan_ahead(jobs: Sequence[Job | Callable[[], Job | None]], after: Sequence[int | None],
                waiting: dict[int, list[int]], keep: Callable[[int, Plan], None], progress: Progress | None) -> None:
    total = len(jobs)
    done = 0
    with Workers(total) as workers:
        if not workers.count:
            return
        running: dict[Future[Plan | None], int] = {}

        def start(index: int) -> None:
            nonlocal done
            job = jobs[index]
            try:
                ready = job() if callable(job) else job
            except Exception:  # noqa: BLE001 - the command meets the same error when it plans the stack
                ready = None
            if ready is None:
                done += 1 + _waiting_on(index, waiting)
                return
            running[workers.submit(ready)] = index

        for index, before in enumerate(after):
            if before is None:
                start(index)
        if progress is not None:
            progress(done, total)
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                index = running.pop(future)
                done += 1
                try:
                    plan = future.result()
                except Exception:  # noqa: BLE001 - a worker that died: the command plans that stack itself
                    plan = None
                if plan is None:
                    done += _waiting_on(index, waiting)
                    continue
                keep(index, plan)
                for later in waiting.pop(index, []):
                    start(later)
            if progress is not None:
                progress(done, total)


def _waiting_on(index: int, waiting: dict[int, list[int]]) -> int:
    """How many jobs wait, directly or not, for job `index` (skipped with it)."""
    later = waiting.pop(index, [])
    return len(later) + sum(_waiting_on(other, waiting) for other in later)
