"""Durable storage without static keys: the driver's S3 client takes the AWS SDK's default chain.

A job whose ``spec.durableStorage`` names no ``credentialsSecret`` gets no ``AWS_*`` variables
from the operator (tests/unit/operator/test_manifests.py), and the driver connects without
keys of its own (``open_durable_copies``), so boto3 looks for credentials as every AWS SDK
does. These tests write and read a durable copy's chunk on a real S3 server (s3proxy) with the
keys reaching boto3 only through one link of that chain at a time: variables the pod
template sets from a Secret, or a shared credentials file (a mounted Secret). With no link
holding any, the copy fails naming the missing credentials.

Web identity (IRSA) and EKS Pod Identity are links of the same chain that hand out temporary
credentials with a session token; the test bed's S3 server refuses session tokens
(``NotImplemented`` for ``x-amz-security-token``), so they are not run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_protocol.chunks import ChunkKey
from snapshot_protocol.errors import SnapshotStoreError
from spark_runtime.durable import DurableStorage, open_durable_copies
from testbed.s3 import S3Server

pytestmark = pytest.mark.integration

CHAIN_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
)


@pytest.fixture
def empty_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """An environment in which no link of the chain has credentials: no variables, empty
    config files, no instance metadata."""
    for name in CHAIN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def _round_trip(s3: S3Server, bucket: str) -> bytes:
    """Writes a chunk through the driver's durable copies, with no keys given, and reads it."""
    storage = DurableStorage(bucket=bucket, prefix="chain", endpoint=s3.endpoint)
    key = ChunkKey(1, "probe", 0, 0)
    with open_durable_copies(storage, environ={}) as copies:
        assert copies is not None
        copies.store.put_chunk("__sj.export.chain", key, b"through the chain")
        return copies.store.read_chunk("__sj.export.chain", key)


def test_an_empty_chain_is_refused_naming_the_missing_credentials(
    s3: S3Server, s3_bucket: str, empty_chain: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SnapshotStoreError, match="Unable to locate credentials"):
        _round_trip(s3, s3_bucket)


def test_variables_from_the_pod_template_reach_the_bucket(
    s3: S3Server, s3_bucket: str, empty_chain: pytest.MonkeyPatch
) -> None:
    """``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` that the pod template's ``env``
    takes from a Secret of the user's own naming."""
    empty_chain.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
    empty_chain.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
    assert _round_trip(s3, s3_bucket) == b"through the chain"


def test_a_shared_credentials_file_reaches_the_bucket(
    s3: S3Server, s3_bucket: str, empty_chain: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {s3.access_key}\naws_secret_access_key = {s3.secret_key}\n"
    )
    empty_chain.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    assert _round_trip(s3, s3_bucket) == b"through the chain"
