"""The driver side of SnapshotJob: runs a PySpark pipeline in epochs and protects its state
with Hazelcast Jet's non-corruptible snapshot protocol.

The pure protocol core lives in :mod:`snapshot_protocol` and imports no I/O library;
adapters for Hazelcast, Kubernetes and PostgreSQL sit beside it.
"""
