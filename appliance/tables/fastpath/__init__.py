"""The fast path around PyIceberg: what a 1-second commit would otherwise repeat, done once.

A SQL catalog that keeps the metadata it read and swaps a commit in with one statement
(`sql_catalog`), transactions without per-read deep copies (`transactions`), metadata files with
each snapshot serialised once (`metadatafile`), manifests and manifest lists encoded with
fastavro and kept in memory (`manifests`), any set of file changes as one snapshot (`changes`:
appends, an upsert's data and position deletes, maintenance's rewrites), a stream's append
(`appends`), position-delete files (`deletes`) and data files written without per-file schema
work (`parquet`). Each writes what PyIceberg would write; the tests compare them. Every private
PyIceberg name they need is imported in `internals`, the one module to check on an upgrade.
"""
