"""Decoding Kafka messages into typed rows: the message formats (JSON, Avro, Protobuf), values into
columns, and the split of a batch into target and dead-letter rows. Between `model` (what a stream
and its rows are) and `tables` (where rows land), which never imports it."""
