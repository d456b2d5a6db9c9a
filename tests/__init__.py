"""aksgpu tests: offline, fast, deterministic."""
