"""Runnable example pipelines for the Spark runtime (see docs/runtime.md)."""
