"""Snapshots nobody can forge: a keyed MAC over each validation record, checked at restore.

Why: the snapshot store (Hazelcast's open-source edition) has no authentication, so whoever
reaches its port can write a chunk, and the chunk checksums (xxh3, which has no key) catch
accidents only: a forger recomputes the checksum in the validation record as well. With a key
only the job's Pods hold, the driver signs every validation record it writes (taking step 5)
with HMAC-SHA256 over the whole record, which lists every chunk with its size and checksum,
so a changed record, or a chunk whose changed checksum the record was made to list, no longer
verifies. A restore (restore step 4) refuses a record that is unsigned or whose MAC does not
verify with one of the job's keys before any state is read; every chunk it reads is then
checked against the checksum the verified record lists (restore step 5, and in the executors).

Keys are named: a record names the key that signed it, so a key can be rotated by signing with
a new one while older ones still verify (``verifying``). Exports and durable copies are copies
of the record, MAC included, so they verify like the snapshot they copy.

What the MAC does not cover: a chunk replaced by different bytes with the same xxh3 checksum
(xxh3 is not collision resistant; crafting such bytes is work, not a recomputation), and a
reader, since nothing is encrypted (docs/operations/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from snapshot_protocol.chunks import RecordMac, ValidationRecord
from snapshot_protocol.errors import SnapshotCorrupted

MIN_KEY_BYTES = 32
"""The shortest key accepted: HMAC-SHA256's own output length."""


@dataclass(frozen=True)
class SnapshotKeys:
    """The keys one execution signs and verifies validation records with.

    Attributes:
        signing_key_id: The key that signs the records this execution writes.
        keys: Every key a restore accepts, by id; the signing key among them.
        accept_unsigned: Whether a restore may take an unsigned record (once, after signing
            was turned on for a job whose snapshots predate it).
    """

    signing_key_id: str
    keys: Mapping[str, bytes] = field(default_factory=dict)
    accept_unsigned: bool = False

    def __post_init__(self) -> None:
        if self.signing_key_id not in self.keys:
            raise ValueError(f"signing key {self.signing_key_id!r} is not among the keys")
        for key_id, key in self.keys.items():
            if len(key) < MIN_KEY_BYTES:
                raise ValueError(
                    f"snapshot key {key_id!r} has {len(key)} bytes; a key needs at least "
                    f"{MIN_KEY_BYTES} (e.g. `openssl rand -base64 48`)"
                )
        object.__setattr__(self, "keys", MappingProxyType(dict(self.keys)))


def mac_of(record: ValidationRecord, key: bytes) -> str:
    """Returns the HMAC-SHA256 of the record's signed payload (all but its MAC), hex."""
    return hmac.new(key, record.signed_payload(), hashlib.sha256).hexdigest()


def sign(record: ValidationRecord, keys: SnapshotKeys | None) -> ValidationRecord:
    """Returns the record with its MAC under the signing key; unchanged without keys."""
    if keys is None:
        return record
    key_id = keys.signing_key_id
    return replace(record, mac=RecordMac(key_id, mac_of(record, keys.keys[key_id])))


def check_signature(map_name: str, record: ValidationRecord, keys: SnapshotKeys | None) -> None:
    """Restore step 4: refuses a record that was not signed with one of the job's keys.

    Args:
        map_name: The map the record was read from, for the message.
        record: The validation record of the snapshot about to be restored.
        keys: The job's keys; None when the job signs nothing, which accepts any record.

    Raises:
        SnapshotCorrupted: If the record is unsigned (and unsigned records are not accepted),
            names a key the job does not have, or its MAC does not verify.
    """
    if keys is None:
        return
    mac = record.mac
    if mac is None:
        if keys.accept_unsigned:
            return
        raise SnapshotCorrupted(
            map_name,
            record.snapshot_id,
            "its validation record has no MAC, so it was not written with the job's key "
            "(a snapshot taken before spec.snapshotSigning was set is restored only with "
            "acceptUnsigned: true)",
        )
    key = keys.keys.get(mac.key_id)
    if key is None:
        known = ", ".join(sorted(keys.keys))
        raise SnapshotCorrupted(
            map_name,
            record.snapshot_id,
            f"its validation record is signed with key {mac.key_id!r}, which the job does not "
            f"have (it has {known}), so it was not written with the job's key",
        )
    if not hmac.compare_digest(mac.value, mac_of(record, key)):
        raise SnapshotCorrupted(
            map_name,
            record.snapshot_id,
            f"the MAC of its validation record does not verify with key {mac.key_id!r}: the "
            "record, or a chunk checksum it lists, was not written with the job's key",
        )
