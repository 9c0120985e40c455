"""Proof that the test bed's S3 server (:mod:`testbed.s3`) speaks the S3 API exports will use.

Snapshot exports to object storage will be multipart uploads of a few MiB, read back in
ranges, found by listing a prefix and removed when expired, all signed with Signature V4.
These tests drive exactly that through boto3 against the real server, so a later failure of
an export test points at the exporter, not at the test bed.
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from testbed.s3 import S3Server

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
# S3's smallest part but the last; the last part is smaller and odd-sized on purpose.
PART_SIZE = 5 * MIB


def _multipart_etag(parts: list[bytes]) -> str:
    """The ETag S3 gives a multipart object: MD5 of the parts' MD5s, a dash, the part count."""
    digests = b"".join(hashlib.md5(part).digest() for part in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def _error(exc: ClientError) -> tuple[str, int]:
    """The error code and HTTP status of a refused call."""
    return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]


def test_multipart_upload_ranged_read_listing_and_delete(s3: S3Server) -> None:
    client = s3.client()
    bucket = "exports-roundtrip"
    client.create_bucket(Bucket=bucket)
    assert bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]

    payload = random.Random(7).randbytes(PART_SIZE + MIB + 123)
    parts = [payload[i : i + PART_SIZE] for i in range(0, len(payload), PART_SIZE)]
    big_key = "job-a/export-1/state.bin"
    upload = client.create_multipart_upload(Bucket=bucket, Key=big_key)
    uploaded: list[CompletedPartTypeDef] = []
    for number, part in enumerate(parts, start=1):
        answer = client.upload_part(
            Bucket=bucket, Key=big_key, UploadId=upload["UploadId"], PartNumber=number, Body=part
        )
        assert answer["ETag"] == f'"{hashlib.md5(part).hexdigest()}"'
        uploaded.append({"PartNumber": number, "ETag": answer["ETag"]})
    completed = client.complete_multipart_upload(
        Bucket=bucket,
        Key=big_key,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": uploaded},
    )
    assert completed["ETag"] == _multipart_etag(parts)

    small_key = "job-a/export-1/manifest.json"
    small = b'{"snapshot_id": 1}'
    put = client.put_object(Bucket=bucket, Key=small_key, Body=small)
    assert put["ETag"] == f'"{hashlib.md5(small).hexdigest()}"'
    client.put_object(Bucket=bucket, Key="job-b/export-1/manifest.json", Body=b"{}")

    listed = client.list_objects_v2(Bucket=bucket, Prefix="job-a/")
    sizes = {o["Key"]: o["Size"] for o in listed["Contents"]}
    assert sizes == {big_key: len(payload), small_key: len(small)}
    assert {o["Key"]: o["ETag"] for o in listed["Contents"]}[big_key] == _multipart_etag(parts)

    head = client.head_object(Bucket=bucket, Key=big_key)
    assert head["ContentLength"] == len(payload)
    assert head["ETag"] == _multipart_etag(parts)
    # A range across the boundary of the two parts.
    first, last = PART_SIZE - 1000, PART_SIZE + 999
    ranged = client.get_object(Bucket=bucket, Key=big_key, Range=f"bytes={first}-{last}")
    assert ranged["ContentRange"] == f"bytes {first}-{last}/{len(payload)}"
    assert ranged["Body"].read() == payload[first : last + 1]
    whole = client.get_object(Bucket=bucket, Key=big_key)["Body"].read()
    assert hashlib.sha256(whole).digest() == hashlib.sha256(payload).digest()
    assert client.get_object(Bucket=bucket, Key=small_key)["Body"].read() == small

    deleted = client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": big_key}, {"Key": small_key}]}
    )
    assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted([big_key, small_key])
    assert client.list_objects_v2(Bucket=bucket, Prefix="job-a/")["KeyCount"] == 0
    with pytest.raises(ClientError) as missing:
        client.head_object(Bucket=bucket, Key=big_key)
    assert _error(missing.value)[1] == 404
    client.delete_object(Bucket=bucket, Key="job-b/export-1/manifest.json")
    client.delete_bucket(Bucket=bucket)
    assert bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_a_wrong_secret_is_refused_and_writes_nothing(s3: S3Server, s3_bucket: str) -> None:
    forger = s3.client(secret_key=s3.secret_key + "x")
    with pytest.raises(ClientError) as listing:
        forger.list_objects_v2(Bucket=s3_bucket)
    assert _error(listing.value) == ("SignatureDoesNotMatch", 403)
    with pytest.raises(ClientError) as writing:
        forger.put_object(Bucket=s3_bucket, Key="forged", Body=b"forged")
    assert _error(writing.value) == ("SignatureDoesNotMatch", 403)
    assert s3.client().list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0


def test_an_unknown_access_key_is_refused(s3: S3Server, s3_bucket: str) -> None:
    stranger = s3.client(access_key="someone-else")
    with pytest.raises(ClientError) as refused:
        stranger.list_objects_v2(Bucket=s3_bucket)
    assert _error(refused.value) == ("InvalidAccessKeyId", 403)
