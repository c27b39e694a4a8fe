"""Floe's terminal UI (Textual). It reaches the engine only through `appliance`'s public
functions and the shared state database; `appliance` never imports this package."""
