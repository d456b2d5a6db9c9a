"""Regenerate every derived file of the repository, or check that each is current.

    .venv/bin/python tools/regenerate.py           # write what is stale
    .venv/bin/python tools/regenerate.py --check   # write nothing; exit 1 naming each stale file

The derived files:
- docs/reference/*.md, the generated reference pages (tools/docs_reference.py);
- aksgpu/cli/short_help_table.py, the table `aksgpu --help` prints without Typer (tools/short_help_table.py,
  from the Typer app: after a change to a command's help or to the commands);
- each example's stacks/environments.schema.json (`aksgpu schema environments`);
- each example's rendered stacks, stacks/Pulumi.<env>.yaml (`aksgpu render`).

The schemas and stacks come from the aksgpu command line, run as a subprocess (the venv's
`aksgpu` script beside this Python), so this file depends on no internal import path; the
reference pages and the help table import aksgpu's internals in tools/docs_reference.py and
tools/short_help_table.py only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = [REPO / "examples" / "gpu-clusters", REPO / "examples" / "gpu-fleet"]
SCHEMA = Path("stacks") / "environments.schema.json"
# `aksgpu render --check` names each stack file that differs: "stacks/Pulumi.dev.yaml: out of date".
_RENDER_STALE = re.compile(r"^(stacks/\S+): (missing|out of date|edited by hand.*)$")


def _aksgpu() -> list[str]:
    """The aksgpu command of this Python's environment."""
    script = shutil.which("aksgpu", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "aksgpu.cli.app"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_aksgpu(), *args], cwd=cwd, capture_output=True, text=True, check=False)


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def _reference_pages() -> dict[Path, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import docs_reference

    return docs_reference.pages()


def _help_table() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import short_help_table

    return short_help_table


def check() -> list[str]:
    """Each stale derived file, with why; writes nothing."""
    stale: list[str] = []
    for path, text in _reference_pages().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(f"{_relative(path)}: differs from what tools/docs_reference.py generates")
    table = _help_table()
    if table.stale():
        stale.append(f"{_relative(table.TABLE)}: differs from what tools/short_help_table.py generates from the app")
    for example in EXAMPLES:
        result = _run(["schema", "environments"], example)
        if result.returncode != 0:
            stale.append(f"{_relative(example / SCHEMA)}: `aksgpu schema environments` failed:\n{result.stderr}")
        elif not (example / SCHEMA).is_file() or (example / SCHEMA).read_text(encoding="utf-8") != result.stdout:
            stale.append(f"{_relative(example / SCHEMA)}: differs from `aksgpu schema environments`")
        result = _run(["render", "--check"], example)
        if result.returncode != 0:
            named = [m for m in map(_RENDER_STALE.match, result.stdout.splitlines()) if m]
            stale += [f"{_relative(example / m.group(1))}: {m.group(2)} (`aksgpu render --check`)" for m in named]
            if not named:
                stale.append(f"{_relative(example)}: `aksgpu render --check` failed:\n{result.stdout}{result.stderr}")
    return stale


def regenerate() -> list[str]:
    """Write every derived file; the problems that stopped one, if any."""
    problems: list[str] = []
    for path, text in _reference_pages().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{_relative(path)}: updated")
    table = _help_table()
    if table.write():
        print(f"{_relative(table.TABLE)}: updated")
    for example in EXAMPLES:
        for args in (["schema", "environments", "-o", str(SCHEMA)], ["render"]):
            result = _run(args, example)
            for line in result.stdout.splitlines():
                print(f"{_relative(example)}: {line}")
            if result.returncode != 0:
                problems.append(f"{_relative(example)}: `aksgpu {' '.join(args)}` exited {result.returncode}:\n"
                                f"{result.stderr}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale file")
    args = parser.parse_args(argv)
    if args.check:
        stale = check()
        for line in stale:
            print(f"stale: {line}", file=sys.stderr)
        if stale:
            print(f"{len(stale)} derived file(s) are stale. Fix: run `.venv/bin/python tools/regenerate.py` and "
                  "commit the result.", file=sys.stderr)
            return 1
        print("every derived file is current")
        return 0
    problems = regenerate()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
