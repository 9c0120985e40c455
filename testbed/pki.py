"""Certificates and kubeconfigs for a throwaway control plane, made with the ``openssl`` CLI.

Why this exists: every control-plane instance gets fresh credentials (a CA, the API server's
serving certificate, client certificates for each component and an admin, a service-account
key) so that no secret outlives a test session and two instances never trust each other. The
``openssl`` command line makes them, so neither the tests nor ``make control-plane-up`` need a
Python crypto package.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class PkiError(RuntimeError):
    """Raised when ``openssl`` fails to make a key or certificate."""


def _run_openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.strip()}")


@dataclass(frozen=True)
class CertSpec:
    """One leaf certificate signed by the testbed CA.

    Attributes:
        name: File stem (``<name>.crt`` / ``<name>.key``).
        common_name: Subject CN; Kubernetes maps it to the user name.
        organizations: Subject O values; Kubernetes maps them to groups.
        server: Whether this is a serving certificate (``serverAuth`` + SANs).
        sans: subjectAltName entries such as ``DNS:localhost`` or ``IP:127.0.0.1``.
    """

    name: str
    common_name: str
    organizations: tuple[str, ...] = ()
    server: bool = False
    sans: tuple[str, ...] = ()


def generate_pki(pki: Path, specs: Sequence[CertSpec]) -> None:
    """Create a CA, the given leaf certificates and a service-account key pair.

    ECDSA P-256 keys are used because they are generated in milliseconds.

    Args:
        pki: Directory to write into (created if needed).
        specs: Leaf certificates to issue.
    """
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _run_openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
        "-subj", "/CN=snapshotjob-testbed-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )  # fmt: skip
    for spec in specs:
        subject = "".join(f"/O={o}" for o in spec.organizations) + f"/CN={spec.common_name}"
        _run_openssl(
            "req", "-new", *ec, "-keyout", f"{spec.name}.key", "-out", f"{spec.name}.csr",
            "-subj", subject,
            cwd=pki,
        )  # fmt: skip
        ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
        ext.append("extendedKeyUsage=" + ("serverAuth,clientAuth" if spec.server else "clientAuth"))
        if spec.sans:
            ext.append("subjectAltName=" + ",".join(spec.sans))
        (pki / f"{spec.name}.ext").write_text("\n".join(ext) + "\n")
        _run_openssl(
            "x509", "-req", "-in", f"{spec.name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-set_serial", "0x" + secrets.token_hex(16), "-days", "365",
            "-extfile", f"{spec.name}.ext", "-out", f"{spec.name}.crt",
            cwd=pki,
        )  # fmt: skip
    _run_openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _run_openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    """Write a self-contained kubeconfig (certificates embedded) for one client identity.

    Args:
        path: Output file.
        server: API server URL.
        pki: Directory holding ``ca.crt`` and ``<user>.crt``/``<user>.key``.
        user: Certificate name to authenticate with.
    """

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "snapshotjob",
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "snapshotjob", "context": {"cluster": "snapshotjob", "user": user}}],
        "current-context": "snapshotjob",
    }
    # JSON is valid YAML, and it avoids a PyYAML dependency for the CLI.
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
