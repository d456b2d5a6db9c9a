"""aksgpu's security policies: a catalog of rules (rules.yaml), one check per rule (checks.py holds
what they share and their tables; cluster_checks.py, pool_checks.py, service_checks.py and
workload_checks.py the checks, by what they read),
their evaluation with an environment's waivers (engine.py), and the Pulumi policy pack that
runs the same checks in a real `pulumi preview --policy-pack policy` (pack.py).

Nothing here imports the CLI or the components: it reads resources as the engine receives them.
"""
