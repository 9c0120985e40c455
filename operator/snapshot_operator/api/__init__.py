"""The CRD of the SnapshotJob resource, rendered from the contract's models (:mod:`.crd`).

The models themselves are in :mod:`snapshotjob_contract`, shared with the Spark runtime.
"""
