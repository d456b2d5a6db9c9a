"""Test oracles: independent checks built from upstream specifications."""
