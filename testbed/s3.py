"""A real S3-compatible server for the tests: s3proxy, one JVM from Maven Central's jar.

Why a real server: snapshot exports are to be written to object storage through the S3 API,
and what they will rely on is the server's behaviour on the wire: Signature V4 requests
refused on a wrong secret, multipart uploads and the ETags they end with, ranged reads,
listing by prefix. An in-process mock (moto) patches the client inside the test's own
interpreter and proves none of that. Why s3proxy: no container registry is reachable from
this machine, and Maven Central serves s3proxy as one self-contained jar (its
``jar-with-dependencies``) that runs on the Java 17 the test bed already has for Hazelcast and
Kafka; it starts in about 3 s on 2 cores. Its ``filesystem`` backend keeps every object as a
file under a data directory of this server's own.

``make install`` fetches the jar into ``~/.cache/snapshotjob/jars``; its version is pinned in
``testbed/s3proxy.version``, which ``hack/install.sh`` reads too. Like every server of the test
bed it is a :class:`~testbed.processes.ManagedProcess`, so an interrupted run leaves no server
behind.
"""

from __future__ import annotations

import os
import secrets
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from testbed.ports import free_port
from testbed.processes import ManagedProcess, wait_until

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_VERSION_FILE = Path(__file__).with_name("s3proxy.version")
S3PROXY_VERSION = os.environ.get("S3PROXY_VERSION") or _VERSION_FILE.read_text().strip()
"""The server's version: ``testbed/s3proxy.version`` unless ``S3PROXY_VERSION`` overrides it
(``hack/install.sh`` reads the same file and variable)."""

_CACHE = Path(os.environ.get("SJ_CACHE", Path.home() / ".cache" / "snapshotjob"))

LOOPBACK = "127.0.0.1"
REGION = "us-east-1"
"""The region clients sign for; s3proxy's default, the one Signature V4 checks against."""


def s3proxy_jar(version: str = S3PROXY_VERSION) -> Path:
    """The server's self-contained jar.

    Raises:
        FileNotFoundError: If ``make install`` has not fetched it.
    """
    jar = _CACHE / "jars" / f"s3proxy-{version}-jar-with-dependencies.jar"
    if not jar.is_file():
        raise FileNotFoundError(f"No s3proxy {version} jar at {jar}: run `make install`")
    return jar


class S3Server:
    """One s3proxy server on a free loopback port, storing objects under ``workdir/data``.

    Args:
        workdir: Directory for the configuration, the objects and the log.
        heap: The JVM's heap (``-Xmx``).
        access_key: The access key id clients sign with.
        secret_key: The secret clients sign with; a random one by default, so no other
            client on this machine can use the server by accident.
    """

    def __init__(
        self,
        workdir: Path,
        heap: str = "256m",
        access_key: str = "snapshotjob-test",
        secret_key: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.datadir = workdir / "data"
        self.config = workdir / "s3proxy.conf"
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_urlsafe(24)
        self.process = ManagedProcess(
            "s3proxy",
            [
                "java",
                f"-Xmx{heap}",
                # One collector thread: the server is small, and the machine has 2 cores.
                "-XX:+UseSerialGC",
                "-jar",
                str(s3proxy_jar()),
                "--properties",
                str(self.config),
            ],
            workdir / "s3proxy.log",
        )

    @property
    def endpoint(self) -> str:
        """The server's URL, for a client's ``endpoint_url``."""
        return f"http://{LOOPBACK}:{self.port}"

    def _properties(self) -> str:
        settings = {
            "s3proxy.endpoint": self.endpoint,
            # Signature V4 is what boto3 sends; V2 stays accepted for older clients.
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.datadir),
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def start(self, timeout: float = 60.0) -> None:
        """Write the configuration, start the server and wait until it answers a signed call."""
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self._properties())
        self.process.start()
        wait_until(self._answers, timeout, f"s3proxy on {self.endpoint}", interval=0.2)

    def _answers(self) -> bool:
        if not self.process.running():
            raise RuntimeError(
                f"s3proxy exited; log {self.process.log_path}:\n{self.process.log_tail()}"
            )
        try:
            # A refusal (ClientError) is not "not yet": it means a wrong configuration, so it
            # propagates instead of being waited out.
            self.client(timeout=2.0).list_buckets()
        except BotoCoreError:  # connection refused or reset: Jetty is not listening yet
            return False
        return True

    def client(
        self,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float = 30.0,
    ) -> S3Client:
        """A boto3 S3 client of this server: Signature V4, path-style addressing, no retries.

        Args:
            access_key: Sign as this access key id instead of the server's (an unknown one is
                refused).
            secret_key: Sign with this secret instead of the server's (a wrong one is refused).
            timeout: Seconds to connect and to wait for each read.

        Returns:
            The client.
        """
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(
                signature_version="s3v4",
                # Buckets as path segments: a loopback address has no bucket subdomains.
                s3={"addressing_style": "path"},
                # A test sees the server's first answer, not one retried into success.
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=timeout,
                read_timeout=timeout,
            ),
        )

    def create_bucket(self, prefix: str = "test") -> str:
        """Create a bucket with a fresh name and return the name, so tests never share keys."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server (SIGTERM stops Jetty gracefully; then SIGKILL)."""
        self.process.stop(timeout=15)

    def kill(self) -> None:
        """SIGKILL the server: a crash."""
        self.process.kill()
