"""The app's sections: one pane each."""
