"""Screens pushed over the sections: stream detail, the new-stream wizard, help, confirmations."""
