"""Keeping tables healthy: compaction, snapshot expiry, orphan files, retention, and their scheduler."""
