"""Plans on every core (aksgpu/plan/workers.py): the commands that plan several stacks print the same
bytes and exit with the same code whether the plans are made in worker processes or one after
another in the command's process (AKSGPU_WORKERS=1), and the workers really make them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.plan import review as review_module
from aksgpu.plan import workers as workers_module
from aksgpu.plan.workers import WORKERS_VARIABLE, worker_count
from tests.helpers import EXAMPLE, FLEET_EXAMPLE, copy_project

# Each comparison plans the fleet's stacks twice (seconds): they run with the slow tests. The default
# run compares the forked workers' bytes through a failing member (below) and the plan server's
# through the example project's ci summary.
_SLOW = pytest.mark.slow
COMMANDS = [pytest.param(args, marks=_SLOW) for args in (
    ["validate"], ["validate", "--json"], ["ci", "summary"], ["plan", "training"], ["plan", "training", "--json"])]


def _run(args: list[str], workers: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str, int]:
    """Exit code, stdout, stderr, and how many plans the command's own process made."""
    planned: Counter[str] = Counter()
    real = review_module.plan_stack

    def counting(stack_file: Any, project: Any = None, stack_outputs: Any = None) -> Any:
        planned[stack_file.stack] += 1
        return real(stack_file, project, stack_outputs)

    monkeypatch.setenv(WORKERS_VARIABLE, str(workers))
    monkeypatch.setattr(review_module, "plan_stack", counting)
    result = CliRunner().invoke(app, args)
    monkeypatch.undo()
    return result.exit_code, result.stdout, result.stderr, sum(planned.values())


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fleet").mkdir()
    return copy_project(FLEET_EXAMPLE, tmp_path / "fleet")


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args))
def test_the_fleet_example_reads_the_same_planned_on_workers_or_one_after_another(
        args: list[str], fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(fleet)
    *sequential, in_process = _run(args, 1, monkeypatch)
    monkeypatch.chdir(fleet)
    *parallel, in_workers = _run(args, 2, monkeypatch)
    assert parallel == sequential
    assert sequential[0] == 0 and in_process >= 4  # the shared stack and three members, at least
    assert in_workers == 0  # every plan came from a worker


def test_a_plan_that_fails_in_a_worker_is_reported_as_the_command_reports_it(
        fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program fails for one member: the worker's failure is dropped, the command plans that
    stack itself and ends with the same one-line error, no traceback."""
    program = fleet / "__main__.py"
    program.write_text("import pulumi\n"
                       "if pulumi.get_stack() == 'training-eastus2':\n"
                       "    raise RuntimeError('the program broke')\n" + program.read_text(encoding="utf-8"),
                       encoding="utf-8")
    monkeypatch.chdir(fleet)
    *sequential, _ = _run(["validate"], 1, monkeypatch)
    monkeypatch.chdir(fleet)
    *parallel, in_process = _run(["validate"], 2, monkeypatch)
    assert parallel == sequential
    assert sequential[0] == 70 and "the program broke" in sequential[2] and "Traceback" not in sequential[2]
    assert in_process == 1  # only the failed member, again, in the command's own process


def test_workers_one_per_core_at_most_one_per_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_VARIABLE, "1")
    assert worker_count(20) == 0
    monkeypatch.setenv(WORKERS_VARIABLE, "3")
    assert worker_count(20) == 3 and worker_count(2) == 2 and worker_count(1) == 0
    monkeypatch.delenv(WORKERS_VARIABLE)
    monkeypatch.setattr(workers_module, "cores", lambda: 2)
    assert worker_count(2) == 0 and worker_count(5) == 0  # forking and a forked plan cost more than a plan
    assert worker_count(6) == 2 and worker_count(1000) == 2
    monkeypatch.setattr(workers_module, "cores", lambda: 1)
    assert worker_count(1000) == 0


def _session(leader: int) -> list[str]:
    """The processes of session `leader` (the command, its plan server and workers), but the leader."""
    table = subprocess.run(["ps", "-eo", "pid,sid,stat"], capture_output=True, text=True, check=True).stdout
    return [pid for pid, sid, stat in (line.split() for line in table.splitlines()[1:])
            if sid == str(leader) and pid != str(leader) and not stat.startswith("Z")]


@pytest.mark.slow
def test_ctrl_c_while_workers_plan_ends_in_one_line_and_no_worker_left(fleet: Path) -> None:
    """SIGINT to the terminal's process group while the workers plan: exit 130, the one line every
    command prints, no traceback, and nothing of the command left running."""
    aksgpu = Path(sys.executable).with_name("aksgpu")
    command = subprocess.Popen([str(aksgpu), "validate"], cwd=fleet, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, env={**os.environ, WORKERS_VARIABLE: "2"})
    deadline = time.monotonic() + 120
    while len(_session(command.pid)) < 2 and time.monotonic() < deadline and command.poll() is None:
        time.sleep(0.1)  # the two workers (forked from the command; from a plan server beside a thread)
    assert command.poll() is None, "the command ended before its workers started"
    os.killpg(command.pid, signal.SIGINT)
    _, err = command.communicate(timeout=60)
    assert command.returncode == 130
    assert err == "interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete.\n"
    time.sleep(1)
    assert _session(command.pid) == []


@pytest.mark.parametrize("args", [["validate", "--spec-only"], pytest.param(["ci", "summary"], marks=_SLOW)],
                         ids=lambda args: " ".join(args))
def test_a_command_resolves_a_fleet_once_for_all_its_members(args: list[str], fleet: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each member's render reads the whole fleet: one command resolves it once, not once per member."""
    from aksgpu.environments import fleet as fleet_module

    resolved: Counter[str] = Counter()
    real = fleet_module._effective_fleet

    def counting(environments: Any, name: str) -> Any:
        resolved[name] += 1
        return real(environments, name)

    monkeypatch.setattr(fleet_module, "_effective_fleet", counting)
    monkeypatch.setenv(WORKERS_VARIABLE, "1")
    monkeypatch.chdir(fleet)
    assert CliRunner().invoke(app, args).exit_code == 0
    assert resolved == Counter({"training": 1})


def test_workers_fork_from_the_command_only_while_it_has_one_thread() -> None:
    """A child forked beside another thread may inherit a lock that thread held: the command forks
    its workers only while its main thread is its only one (the kernel's count); else a plan server."""
    import threading

    code = "from aksgpu.plan.workers import _forks_here; print(_forks_here())"
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert alone.stdout == ("True\n" if sys.platform == "linux" else "False\n")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not workers_module._forks_here()
    finally:
        stop.set()
        thread.join()


def test_the_plan_server_path_reads_the_same_for_the_example_project(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan server's workers plan the example project's two stacks: the same bytes as planning
    them one after another (a second; the fleet's five stacks, below, run with the slow tests)."""
    _plan_server_reads_the_same(copy_project(EXAMPLE, tmp_path), monkeypatch)


@pytest.mark.slow  # plans the fleet's stacks twice, once in a plan server's workers: seconds
def test_the_plan_server_path_reads_the_same(fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the command may not fork (another thread), its workers come from the plan server: the
    same bytes as planning one after another."""
    _plan_server_reads_the_same(fleet, monkeypatch)


def _plan_server_reads_the_same(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ci summary` in `project` on the plan server's two workers against one stack after another."""
    monkeypatch.setattr(workers_module, "_forks_here", lambda: False)
    monkeypatch.chdir(project)
    *sequential, _ = _run(["ci", "summary"], 1, monkeypatch)
    monkeypatch.setattr(workers_module, "_forks_here", lambda: False)
    monkeypatch.chdir(project)
    *parallel, in_process = _run(["ci", "summary"], 2, monkeypatch)
    assert parallel == sequential and sequential[0] == 0
    assert in_process == 0


@pytest.mark.parametrize(("terminal", "forks_here", "started"), [(False, True, False), (True, True, True),
                                                                (False, False, True)])
def test_the_plan_server_starts_early_where_the_workers_will_come_from_it(
        terminal: bool, forks_here: bool, started: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the spinner's thread rules out forking from the command when it plans: the plan
    server starts at once, to import while the command validates; elsewhere the command forks them."""
    calls: list[str] = []
    monkeypatch.setattr(workers_module, "_context", lambda: calls.append("server"))
    monkeypatch.setattr(workers_module, "_forks_here", lambda: forks_here)
    monkeypatch.setattr(workers_module, "worker_count", lambda jobs: 2)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    workers_module.warm_up(10)
    assert calls == (["server"] if started else [])
