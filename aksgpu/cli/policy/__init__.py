"""aksgpu's security policies on the command line: the rule catalog (`policy list`, `policy show`).
The rules themselves, their checks and their evaluation live in aksgpu/policy/; `plan`, `validate`
and `ci summary` run them over each offline plan."""
