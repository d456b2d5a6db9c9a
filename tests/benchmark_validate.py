"""How many generated hostile specs per second `aksgpu validate` gets through (prints figures).

Run: .venv/bin/python tests/benchmark_validate.py [CASES] [--quick] [--baseline DIR]
Cases come from tests/fuzz.py (seeded). Two figures: the whole command in-process (read the
file, strict YAML, every spec rule, the report), and the spec rules alone on the same specs.
Then, in fresh processes in the example project, interleaved (tests/command_timing.py): the quick
commands (`--help`, `--version`, `validate --spec-only`, `render --check`) against `python -c pass`,
and `validate` and `ci summary` with plans on every core against the same commands planning one
stack after another (AKSGPU_WORKERS=1), their output checked equal. --baseline DIR adds the same
commands of another checkout (DIR/.venv, in DIR's own example project), interleaved with these, and
their ratio (issue 28 measures against 638439c). --quick: 50 cases, 2 rounds (CI runs it so that it
cannot rot). A case that ends in an internal error (a traceback instead of a message) ends the
benchmark with a non-zero exit. Commands run with Python's bytecode cache, as an install has it.
"""

from __future__ import annotations

import argparse
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="?", type=int, help="generated stack files (default 500; 50 with --quick)")
    parser.add_argument("--quick", action="store_true", help="50 cases and 2 rounds (CI runs it)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout with its own .venv, timed interleaved with this one")
    options = parser.parse_args()
    quick, baseline = options.quick, options.baseline.resolve() if options.baseline else None
    count = options.cases if options.cases is not None else 50 if quick else 500
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
    commands(rounds=2 if quick else 9, baseline=baseline)


def commands(rounds: int, baseline: Path | None = None) -> None:
    """The quick commands against a bare interpreter, and the planning commands against their
    sequential path, in the example project (interleaved, medians of `rounds`); with `baseline`, each
    against the same command of that checkout in its own example project too."""
    from tests.command_timing import AKSGPU, Variant, baseline_aksgpu, interleaved, machine

    base = baseline_aksgpu(baseline) if baseline is not None else None
    base_project = baseline / "examples" / EXAMPLE.name if baseline is not None else EXAMPLE

    def with_baseline(variants: dict[str, Variant], args: list[str]) -> dict[str, Variant]:
        return {**variants, "baseline": ([base, *args], {}, base_project)} if base is not None else variants

    print(f"\nIn {EXAMPLE.name} ({machine()}; median of {rounds} interleaved rounds"
          f"{f'; baseline {baseline}' if baseline is not None else ''}):")
    quick = interleaved({"python -c pass": ([sys.executable, "-c", "pass"], {}),
                         "aksgpu --help": ([AKSGPU, "--help"], {}),
                         "aksgpu --version": ([AKSGPU, "--version"], {})}, EXAMPLE, rounds)
    bare = quick.pop("python -c pass")
    print(f"  {'python -c pass':<30} {bare * 1000:6.0f} ms")
    for name, seconds in quick.items():
        print(f"  {name:<30} {seconds * 1000:6.0f} ms  ({seconds / bare:.1f}x python -c pass)")
    for args in (["validate", "--spec-only"], ["render", "--check"]):
        name = "aksgpu " + " ".join(args)
        times = interleaved(with_baseline({"this": ([AKSGPU, *args], {}),
                                           "python -c pass": ([sys.executable, "-c", "pass"], {})}, args),
                            EXAMPLE, rounds)
        against = (f", baseline {times['baseline'] * 1000:.0f} ms: {times['this'] / times['baseline']:.2f}x"
                   if "baseline" in times else "")
        print(f"  {name:<30} {times['this'] * 1000:6.0f} ms  ({times['this'] / times['python -c pass']:.1f}x "
              f"python -c pass{against})")
    for args in (["ci", "summary"], ["validate"]):
        name = "aksgpu " + " ".join(args)
        times = interleaved(with_baseline({"every core": ([AKSGPU, *args], {}),
                                           "one after another": ([AKSGPU, *args], {"AKSGPU_WORKERS": "1"})}, args),
                            EXAMPLE, rounds)
        against = (f"; baseline {times['baseline']:.2f} s: {times['every core'] / times['baseline']:.2f}x"
                   if "baseline" in times else "")
        print(f"  {name:<30} {times['every core']:6.2f} s on every core, {times['one after another']:.2f} s one "
              f"stack after another: {times['every core'] / times['one after another']:.2f}x{against}")


if __name__ == "__main__":
    main()
