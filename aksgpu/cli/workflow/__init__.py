"""The real Pulumi workflow through the Automation API (preview, up, destroy, refresh, outputs),
kubeconfig handling, and the Azure CLI steps that `backend bootstrap` and `ci oidc` run."""
