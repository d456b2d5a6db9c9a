"""How many generated hostile specs per second `aksgpu validate` gets through (prints figures).

Run: .venv/bin/python tests/benchmark_validate.py [CASES] [--quick]
--quick: 20 cases (tests/test_benchmarks.py runs it). A case that ends in an internal error (a
traceback instead of a message) ends the benchmark with a non-zero exit.
Cases come from tests/fuzz.py (seeded). Two figures: the whole command in-process (read the
file, strict YAML, every spec rule, the report), and the spec rules alone on the same specs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.project.yaml_input import YamlProblem, decode_utf8, parse_yaml
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.fuzz import Generator, write_case
from tests.helpers import EXAMPLE


def main() -> None:
    numbers = [arg for arg in sys.argv[1:] if arg != "--quick"]
    count = 20 if "--quick" in sys.argv else int(numbers[0]) if numbers else 500
    cases = [case for case in Generator(1).cases(count * 3) if case.kind == "stack"][:count]
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        for name in ("Pulumi.yaml", "__main__.py"):
            shutil.copy(EXAMPLE / name, project / name)
        shutil.copytree(EXAMPLE / "stacks", project / "stacks")
        import os

        os.chdir(project)
        runner = CliRunner()
        started = time.perf_counter()
        for case in cases:
            args = write_case(case, project)
            result = runner.invoke(app, args)
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                raise SystemExit(f"benchmark failed: aksgpu {' '.join(args)} raised "
                                 f"{type(result.exception).__name__}: {result.exception}")
        command_seconds = time.perf_counter() - started
    specs = []
    for case in cases:
        try:
            document = parse_yaml(decode_utf8(case.data))
        except YamlProblem:
            continue
        cluster = ((document or {}).get("config") or {}).get("aksgpu:cluster") if isinstance(document, dict) else None
        specs.append(cluster)
    started = time.perf_counter()
    for cluster in specs:
        try:
            parse_cluster_spec(cluster)
        except SpecError:
            pass
    rules_seconds = time.perf_counter() - started
    print(f"aksgpu validate STACKFILE (in-process): {len(cases)} generated specs in {command_seconds:.2f} s, "
          f"{len(cases) / command_seconds:.0f} specs/s")
    print(f"spec rules alone (parse_cluster_spec): {len(specs)} specs in {rules_seconds:.2f} s, "
          f"{len(specs) / rules_seconds:.0f} specs/s")


if __name__ == "__main__":
    main()
