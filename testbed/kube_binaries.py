"""The Kubernetes binaries of the test beds: where they are cached and how they get built.

Why this exists: no release download is reachable from the machines this project is tested
on, so ``hack/kube/build.sh`` builds Kubernetes, etcd, kind, helm and the rest from the Go
module proxy into a cache outside the repository. The control plane, the kind cluster and the
pytest plugin that builds what the selected tests need all find the binaries through this
module, so they agree on the cache directory with the build script.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from testbed import artifacts

LOG = logging.getLogger("snapshotjob.kube.binaries")

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
HACK_KUBE: Final = REPO_ROOT / "hack" / "kube"
BUILD_SCRIPT: Final = REPO_ROOT / artifacts.BUILD_SCRIPT
CONTROL_PLANE_BINARIES: Final = tuple(a.name for a in artifacts.CONTROL_PLANE)
"""etcd, the API server, controller-manager, scheduler and kubectl: the control plane's."""
CONTROL_PLANE_GROUPS: Final = tuple(dict.fromkeys(a.step for a in artifacts.CONTROL_PLANE))
"""The ``build.sh`` groups that build :data:`CONTROL_PLANE_BINARIES`."""


class BinaryBuildError(RuntimeError):
    """Raised when ``hack/kube/build.sh`` fails or leaves a needed binary missing."""


def read_versions() -> dict[str, str]:
    """Parse ``hack/kube/versions.env`` (simple ``KEY=value`` lines).

    Returns:
        The pinned component versions keyed by variable name.
    """
    versions: dict[str, str] = {}
    for raw in (HACK_KUBE / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


def default_bin_dir() -> Path:
    """Return the binary cache directory that ``hack/kube/build.sh`` writes to.

    ``KUBE_BIN_DIR`` overrides it, exactly as in the build script.
    """
    override = os.environ.get("KUBE_BIN_DIR")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "snapshotjob" / "kube" / read_versions()["KUBE_VERSION"] / "bin"


def binary_path(name: str) -> Path:
    """Return where the binary ``name`` is (or will be) in the default cache.

    It is not checked: a caller that needs it built calls :func:`ensure_binaries` first.
    """
    return default_bin_dir() / name


def missing_binaries(bin_dir: Path, names: Sequence[str]) -> list[str]:
    """List the binaries of ``names`` that are not executable files in ``bin_dir``."""
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def ensure_binaries(
    names: Sequence[str] = CONTROL_PLANE_BINARIES,
    groups: Sequence[str] = CONTROL_PLANE_GROUPS,
    bin_dir: Path | None = None,
) -> Path:
    """Make sure the binaries exist, building them from source when they do not.

    A cold build compiles Kubernetes from the Go module proxy and takes tens of minutes on
    a 2-core machine; it is logged, never skipped silently.

    Args:
        names: Binary names that must exist afterwards.
        groups: ``build.sh`` groups that produce them.
        bin_dir: Cache directory; defaults to :func:`default_bin_dir`.

    Returns:
        The directory holding the binaries.

    Raises:
        BinaryBuildError: If the build fails or still leaves binaries missing.
    """
    target = bin_dir or default_bin_dir()
    missing = missing_binaries(target, names)
    if not missing:
        return target
    LOG.warning(
        "Building missing Kubernetes binaries, this takes long on a cold cache "
        "missing=%s bin_dir=%s",
        ",".join(missing),
        target,
    )
    env = dict(os.environ, KUBE_BIN_DIR=str(target))
    result = subprocess.run(["bash", str(BUILD_SCRIPT), *groups], env=env, check=False)
    still = missing_binaries(target, names)
    if result.returncode != 0 or still:
        raise BinaryBuildError(
            f"hack/kube/build.sh {' '.join(groups)} failed rc={result.returncode} "
            f"missing={','.join(still)}; run `make kube-binaries` to see the build log"
        )
    return target
