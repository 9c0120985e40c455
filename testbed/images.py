"""The names of the images ``hack/images/build.sh`` builds from its Dockerfiles.

They are written once, in ``hack/images/images.env`` (shell ``NAME=value`` lines, which
``build.sh`` sources); this module reads that file so Python code (tests, the test bed) names
the same images. Each name maps to the ``build.sh`` target that builds it, which is also the
Dockerfile's stem (``hack/images/<target>.Dockerfile``) and the name of its SBOM
(``dist/sbom/<target>.spdx.json``).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES_ENV = REPO / "hack" / "images" / "images.env"
SBOM_DIR = REPO / "dist" / "sbom"

TARGETS: dict[str, str] = {
    "OPERATOR_IMAGE": "operator",
    "SPARK_RUNTIME_IMAGE": "spark-runtime",
    "MEMBER_IMAGE": "member",
    "KAFKA_BROKER_IMAGE": "test-kafka-broker",
    "S3PROXY_IMAGE": "test-s3proxy",
}
"""images.env's variable -> the ``build.sh`` target (and Dockerfile stem) of that image."""

TEST_ONLY = frozenset({"test-kafka-broker", "test-s3proxy"})
"""Targets whose images only the examples and the tests run; no release ships them."""

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)$")


def read_images_env(path: Path = IMAGES_ENV) -> dict[str, str]:
    """images.env's ``NAME=value`` assignments, in file order (comments and blanks skipped).

    Raises:
        ValueError: On a line that is neither a comment, blank nor ``NAME=value``.
    """
    names: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(stripped)
        if match is None:
            raise ValueError(f"{path}:{number}: not NAME=value: {line!r}")
        names[match.group(1)] = match.group(2)
    return names


def split_images() -> dict[str, str]:
    """``build.sh`` target -> image name, for every image of images.env."""
    env = read_images_env()
    return {target: env[variable] for variable, target in TARGETS.items()}
