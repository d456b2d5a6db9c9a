"""The aksgpu command line, one subpackage per concern; each says in its docstring what it owns.

- app.py: the Typer app, wiring each concern's commands together, and nothing else.
- arguments.py, console.py, errors.py, exit_codes.py: what every command shares (options with
  completion, how errors and status lines print, UserError, the exit codes).
- project/: the user's Pulumi project on disk (stack files, strict YAML, atomic writes,
  generated-file stamps, `aksgpu new`).
- environments/: stacks/environments.yaml, presets and overrides, rendering stack files,
  validation, schemas (`validate`, `render`, `init`, `new`, `diff`, `schema`, `presets`).
- plan/: the offline plan under Pulumi's mock runtime and its reports (`plan`).
- workflow/: the real Pulumi workflow through the Automation API, kubeconfig, and the Azure CLI
  steps (`preview`, `up`, `destroy`, `refresh`, `outputs`, `kubeconfig`, `backend bootstrap`).
- ci/: CI pipelines for the user's repository and the identities they sign in with (`ci ...`).
- preflight/: the VM size catalog (`vm-sizes`; the table is aksgpu/components/data/vm_sizes.yaml),
  what a cluster will cost and the price table behind it (`cost`, `prices refresh`); the quota,
  cost and deploy-time estimates are in aksgpu/preflight/.
- policy/: the security policy catalog (`policy list`, `policy show`); the rules are in aksgpu/policy/.

Data flows one way: environments.yaml → stack files → ClusterSpec → components → resources.
Nothing in aksgpu/components/ imports from here.
"""
