"""stacks/environments.yaml and what is made from it: presets, the effective spec of each
environment, rendered stack files, validation, JSON Schemas, `init`, `diff` and `presets`."""
