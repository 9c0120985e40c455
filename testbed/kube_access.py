"""How the tests reach a test bed's Kubernetes API: a client library handle and ``kubectl``.

Why this exists: both test beds (the control plane and the kind cluster) hand out the same
two ways in, an ``ApiClient`` of the kubernetes library bound to their admin kubeconfig and
the ``kubectl`` built by ``hack/kube/build.sh``; this is their one implementation.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def new_api_client(kubeconfig: Path) -> Any:
    """Return a new ``kubernetes.client.ApiClient`` bound to ``kubeconfig``."""
    from kubernetes import config

    loader: Any = config  # untyped function in the client library
    return loader.new_client_from_config(config_file=str(kubeconfig))


def run_kubectl(kubectl: Path, kubeconfig: Path, *args: str, timeout: float = 120) -> str:
    """Run ``kubectl`` against ``kubeconfig`` and return its stdout.

    Raises:
        RuntimeError: If kubectl fails; the message carries its stderr.
    """
    result = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout
