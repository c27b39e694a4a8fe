"""What every layer shares: errors, the vocabulary, clocks, file locks, failpoints."""
