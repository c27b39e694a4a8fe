"""Settings from TOML, the units they are written in, and maintenance policies."""
