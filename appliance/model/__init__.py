"""What a stream is and what its rows look like: names, columns, mappings, decoding."""
