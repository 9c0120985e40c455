"""Runnable example pipelines for the Spark runtime (see docs/reference/runtime.md)."""
