"""The demo: pizza orders on an embedded broker, one stream, the UI."""
