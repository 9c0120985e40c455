"""The snapshot store on Hazelcast, shared by the driver and the operator.

The driver writes and restores snapshot chunks through it; the operator copies exported
snapshots and destroys a deleted job's maps through it. Both must validate a snapshot the same
strict way (``docs/concepts/protocol.md``, restore step 4), so there is one implementation, outside
either program: neither ``spark_runtime`` nor ``snapshot_operator`` imports the other.
"""
