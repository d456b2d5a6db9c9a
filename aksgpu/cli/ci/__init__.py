"""CI for the repository that holds an aksgpu project: GitHub Actions and Azure Pipelines rendered
from templates, the helpers those pipelines call, and the OIDC identities they sign in with."""
