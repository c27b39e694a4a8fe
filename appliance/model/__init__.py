"""What a stream is and what its rows look like: names, types, columns, mappings, inference, and the
schema changes messages can ask for."""
