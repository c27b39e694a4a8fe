"""The new-stream wizard: Source (Kafka), Target (Iceberg tables), Mapping (columns), Create."""

from tui.screens.new_stream.screen import NewStreamScreen

__all__ = ["NewStreamScreen"]
