"""The repository that holds an aksgpu project and its CI: `aksgpu new` (scaffold.py: the project
files, its first environment and its workflows), GitHub Actions and Azure Pipelines rendered from
templates (pins in data/), the pull-request comment, and the OIDC identities the pipelines sign in
with.
"""
