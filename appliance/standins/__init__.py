"""Local stand-ins for the servers a team runs, for the demo, the pytest plugin and the tests: a
Kafka-protocol broker (librdkafka's mock cluster) and a schema registry (Confluent's REST subset)."""
