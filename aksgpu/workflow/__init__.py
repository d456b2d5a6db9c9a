"""The real path's domain parts: where a stack lives and what it needs (target.py), kubeconfig
handling, `backend bootstrap`, and the Azure CLI steps it shares with `ci oidc`. The Automation
API runner and a fleet's `up`, which talk to the terminal, are in aksgpu/cli/workflow.
"""
