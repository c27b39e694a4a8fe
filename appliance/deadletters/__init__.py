"""Dead letters: list, replay into the target once the mapping is fixed, purge."""
