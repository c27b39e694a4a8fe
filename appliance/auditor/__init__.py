"""`floe audit`: proof that every offset of a stream landed exactly once, in its target or dead-letter table."""

from appliance.auditor.check import audit_stream, audit_streams
from appliance.auditor.report import AuditReport, OffsetRange, PartitionAudit

__all__ = ["AuditReport", "OffsetRange", "PartitionAudit", "audit_stream", "audit_streams"]
