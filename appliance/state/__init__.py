"""The appliance's own state in SQLite: stream definitions, status, batches, events, maintenance."""
