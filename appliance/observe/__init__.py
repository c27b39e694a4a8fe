"""Floe watching itself: system tables, alerts and their notifications, Prometheus metrics."""
