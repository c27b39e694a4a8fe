"""Floe: Kafka topics into Apache Iceberg tables, exactly once, on one machine.

The engine lives here and knows nothing of any user interface.
"""

__version__ = "0.1.0"
