"""Connects to the Kubernetes API: the in-cluster service account, else ``KUBECONFIG``.

Kept apart from ``__main__`` so that the ``kubernetes`` client is imported only by the
modules that talk to the API (an import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client, config


def connect() -> client.ApiClient:
    """Loads the credentials and returns an API client for them."""
    loader: Any = config  # untyped functions of the client library
    try:
        loader.load_incluster_config()
    except config.ConfigException:
        loader.load_kube_config()
    return client.ApiClient()
