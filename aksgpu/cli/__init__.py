"""The aksgpu CLI: Typer app, offline planner, stack files."""
