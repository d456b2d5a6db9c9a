"""The aksgpu command line: Typer wiring only. Each command parses its arguments, calls the domain
package of its concern and prints the result; no module here holds domain logic (tests/test_layout.py).

- app.py: the Typer app, wiring each concern's commands together, and nothing else.
- entry.py, short_help.py: the console script, which answers `--version` and `--help` alone without
  Typer (the help from short_help_table.py, which tools/regenerate.py derives from the app).
- arguments.py, console.py: what every command shares (options with completion, how errors and
  status lines print). The error type and exit codes are aksgpu/errors.py.
- environments/: `validate`, `render`, `init`, `new`, `diff`, `schema`, `presets` (aksgpu.environments,
  aksgpu.ci.scaffold).
- plan/: `plan` (aksgpu.plan).
- workflow/: `preview`, `up`, `destroy`, `refresh`, `outputs`, `kubeconfig`, `backend bootstrap`, with
  the Automation API runner and a fleet's `up`, which talk to the terminal (aksgpu.workflow).
- ci/: `ci ...` (aksgpu.ci).
- preflight/: `vm-sizes`, `cost`, `prices refresh` (aksgpu.preflight, aksgpu.catalog).
- policy/: `policy list`, `policy show` (aksgpu.policy).
- capacity/: `verdict-history query`, `verdict-history import` (aksgpu.preflight.verdict_history).
- promotion/: `promote` (aksgpu.promotion).
"""
