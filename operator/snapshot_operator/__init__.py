"""The SnapshotJob operator: reconciles ``SnapshotJob`` resources with kopf.

This folder's parent, ``operator/``, is deliberately not a package: a package named
``operator`` would shadow the standard library module of the same name.
"""
