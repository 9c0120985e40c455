"""The test bed: real servers and processes for the tests, the benchmarks and the demo.

Why a package of its own: every tier above the unit tests runs against real components
(Hazelcast members from the Maven jar, PostgreSQL, PySpark, a Kubernetes control plane built
from source, kind), never a mock standing in for a server, and the same launchers serve the
pytest fixtures, ``bench/`` and ``examples/demo.py``.
Keeping them out of ``tests/`` lets those import them without importing the tests, and
keeping them out of ``spark_runtime`` and ``snapshot_operator`` keeps test tooling out of the
product's wheel (import-linter forbids the product to import this package).

Nothing here imports pytest: the fixtures in ``tests/fixtures/`` are thin pytest plugins
over these modules.
"""
