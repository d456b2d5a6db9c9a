"""stacks/environments.yaml and what is made from it: presets, overrides and `--set`, the effective
spec of each environment, rendered stack files, fleet environments, validation and JSON Schemas.

Reads the project (aksgpu.project) and the spec (aksgpu.spec); the CLI's `validate`, `render`,
`init`, `diff`, `schema` and `presets` commands (aksgpu/cli/environments) call it.
"""
