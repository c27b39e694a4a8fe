"""Kafka client code with confluent-kafka: connection settings, metadata and samples, reading offset
ranges in tasks, the schema registry client."""
