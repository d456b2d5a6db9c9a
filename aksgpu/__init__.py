"""aksgpu: AKS GPU clusters from one validated spec.

Packages by concern, each saying in its docstring what it owns; imports go down this list
(tests/test_layout.py holds the allowed imports as data):
- cli/: the command line, Typer wiring only.
- workflow/, ci/, plan/: the real path (Automation API), the user's repository and its CI, the
  offline plan and its review (policies, cost, deploy time).
- components/, program/: the Pulumi ComponentResources and the program a project's __main__.py runs.
- environments/, project/, preflight/: environments.yaml and rendered stacks, the project on disk,
  quota, cost and deploy-time estimates.
- spec/: ClusterSpec and FleetSpec with their rules; policy/: the security rule catalog and checks.
- catalog/, errors.py: sourced facts about Azure, GPUs and upstream components; the error type and
  exit codes.
- node/: programs that run on the GPU nodes (the gate, the GPU check), importing only catalog.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # __version__ on first use: importlib.metadata costs about 25 ms, which every command would pay.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("aksgpu")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'aksgpu' has no attribute {name!r}")
