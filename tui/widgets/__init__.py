"""Helpers shared by the panes and screens: live tables and texts, form fields."""
