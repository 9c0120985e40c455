"""The test bed's OCI registry: images and the chart pushed once, pulled with pull Secrets.

Why this exists: users install the chart from a registry (``helm install oci://...``) and
their nodes pull the images with ``imagePullSecrets``; the cluster tier and ``make demo`` do
the same instead of copying images into the nodes (``kind load``). ``hack/kube/registry.sh``
runs the CNCF distribution registry (TLS from a CA it generates, basic auth) as the container
``sj-registry`` on the kind network; this module is its Python face: start it and make a
cluster's nodes trust it, push, and write the pull Secret and the chart's values.

The registry has two names: this machine pushes to ``127.0.0.1:<port>`` (published), the
nodes pull from ``sj-registry:5000`` (the container on the kind network). A pushed image is
handed out as ``sj-registry:5000/<repository>@sha256:...``: by digest, so a node never runs
a stale ``:dev`` it pulled earlier, and ``IfNotPresent`` pulls exactly when the image changed.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from testbed.kube_binaries import HACK_KUBE

SCRIPT: Final = HACK_KUBE / "registry.sh"
CHART_NAME: Final = "snapshotjob-operator"


class RegistryError(RuntimeError):
    """Raised when the registry cannot be started, reached or pushed to."""


def _run(*args: str, cluster: str | None = None, timeout: float = 900) -> str:
    env = dict(os.environ)
    if cluster is not None:
        env["KIND_CLUSTER_NAME"] = cluster
    result = subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RegistryError(
            f"hack/kube/registry.sh {' '.join(args)} failed rc={result.returncode}:\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    return result.stdout


@dataclass(frozen=True)
class Registry:
    """A running test bed registry (``hack/kube/registry.sh env``).

    Attributes:
        push_host: Where this machine pushes (``127.0.0.1:<port>``).
        pull_host: Where the nodes pull from (``sj-registry:5000``).
        user: The basic-auth user.
        password_file: The file holding its generated password.
        ca: The CA certificate the registry's TLS certificate is signed by.
        secret: The pull Secret's name the cluster tier and the demo use.
        helm_registry_config: helm's registry credentials (``helm registry login``).
    """

    push_host: str
    pull_host: str
    user: str
    password_file: Path
    ca: Path
    secret: str
    helm_registry_config: Path

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def chart_url(self) -> str:
        """``oci://`` address of the chart (helm on this machine reads it)."""
        return f"oci://{self.push_host}/charts/{CHART_NAME}"

    def helm_args(self) -> list[str]:
        """The flags helm needs to read the chart from the registry: its CA and the login."""
        return ["--registry-config", str(self.helm_registry_config), "--ca-file", str(self.ca)]

    def push(self, *images: str) -> dict[str, str]:
        """Pushes local images; returns each one's pull reference by digest."""
        refs: dict[str, str] = {}
        for line in _run("push", *images).splitlines():
            local, _, ref = line.partition(" ")
            if ref:
                refs[local] = ref
        missing = [image for image in images if image not in refs]
        if missing:
            raise RegistryError(f"registry.sh push printed no reference for {missing}")
        return refs

    def push_chart(self, chart_dir: Path) -> str:
        """``helm package`` + ``helm push`` of the chart; returns its version."""
        return _run("push-chart", str(chart_dir)).strip().splitlines()[-1]

    def pull_secret(
        self, namespace: str, name: str | None = None, password: str | None = None
    ) -> dict[str, Any]:
        """A ``kubernetes.io/dockerconfigjson`` Secret for the nodes' pulls.

        Args:
            namespace: Where the Pods that pull run.
            name: The Secret's name; the registry's default (``sj-registry``) if None.
            password: Another password than the registry's (a wrong Secret, for tests).
        """
        secret_password = self.password if password is None else password
        token = base64.b64encode(f"{self.user}:{secret_password}".encode()).decode()
        config = {
            "auths": {
                self.pull_host: {
                    "username": self.user,
                    "password": secret_password,
                    "auth": token,
                }
            }
        }
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name or self.secret, "namespace": namespace},
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        }

    def chart_values(self) -> dict[str, Any]:
        """The chart's values that make it pull from this registry with the pull Secret: the
        registry before the operator's and the members' repositories, the Secret for them
        and for every job's driver and executors."""
        secrets = [{"name": self.secret}]
        return {
            "global": {"imageRegistry": self.pull_host},
            "imagePullSecrets": secrets,
            "jobs": {"imagePullSecrets": secrets},
        }

    def repository(self, ref: str) -> tuple[str, str]:
        """Splits a pull reference ``<pull_host>/<repository>@<digest>`` into the repository
        without the registry (the chart prefixes ``global.imageRegistry``) and the digest."""
        name, _, digest = ref.partition("@")
        return name.removeprefix(f"{self.pull_host}/"), digest

    def image_values(self, ref: str) -> dict[str, str]:
        """The chart's values of one image (``operator.image``, ``hazelcast.image``) pulled
        from this registry by digest: the pull reference ``ref`` split by :meth:`repository`."""
        repository, digest = self.repository(ref)
        return {"repository": repository, "digest": digest, "pullPolicy": "IfNotPresent"}


def parse_env(text: str) -> Registry:
    """The registry ``registry.sh env`` describes (its ``KEY=value`` lines)."""
    env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return Registry(
        push_host=env["SJ_REGISTRY_PUSH"],
        pull_host=env["SJ_REGISTRY_PULL"],
        user=env["SJ_REGISTRY_USER"],
        password_file=Path(env["SJ_REGISTRY_PASSWORD_FILE"]),
        ca=Path(env["SJ_REGISTRY_CA"]),
        secret=env["SJ_REGISTRY_SECRET"],
        helm_registry_config=Path(env["HELM_REGISTRY_CONFIG"]),
    )


def up(cluster: str) -> Registry:
    """Starts the registry if it is not running (``registry.sh up``: builds its binary and
    image if missing) and makes the kind cluster's nodes trust it (``registry.sh connect``)."""
    _run("up")
    _run("connect", cluster=cluster, timeout=300)
    return parse_env(_run("env"))
