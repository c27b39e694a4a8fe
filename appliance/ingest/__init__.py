"""Kafka to committed Iceberg snapshots: planning, the Spark batch, commits, the stream runner, the engine."""
