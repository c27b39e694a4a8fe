"""The operations the CLI, the demo and the UI share: checking and creating streams, pausing,
deleting, sampling a topic, requesting maintenance, starting the engine process."""
