"""Merge-on-read for upsert tables: which message of a key wins (`precedence`), a key as one or two
64-bit words (`keyforms`), each key's row in a compact index (`index`, `shards`, `segments`), kept on disk
(`store`) and brought to a table's snapshot by replaying Floe's own commits (`lineage`), the position
deletes that replace rows (`deletes`), carried through rewrites (`folding`), and the commits that write
them (`commit`, `replayed`)."""
