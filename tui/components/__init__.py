"""One module per screen or pane."""
