"""Kafka with confluent-kafka: connection settings, metadata and samples, reading offset ranges."""
