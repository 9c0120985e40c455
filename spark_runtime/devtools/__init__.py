"""Tools for developing and testing the runtime: running the driver as a separate process."""
