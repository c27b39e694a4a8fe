"""Typed read models of the engine's state and the tables, for the CLI and the UI."""
