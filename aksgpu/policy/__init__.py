"""aksgpu's security policies: a catalog of rules (rules.yaml), one check per rule (checks.py),
their evaluation with an environment's waivers (engine.py), and the Pulumi policy pack that
runs the same checks in a real `pulumi preview --policy-pack policy` (pack.py).

Nothing here imports the CLI or the components: it reads resources as the engine receives them.
"""
