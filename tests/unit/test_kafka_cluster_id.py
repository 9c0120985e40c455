"""The test bed's Kafka cluster ids are valid KRaft ids that no command line reads as an option."""

from __future__ import annotations

import base64
from pathlib import Path

from testbed.kafka import new_cluster_id, storage_format_args


def test_cluster_ids_are_16_bytes_and_never_start_with_a_dash() -> None:
    ids = [new_cluster_id() for _ in range(3000)]
    # With one id in 64 starting with "-", 3000 draws without the guard fail all but surely.
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(cluster_id + "==")) == 16 for cluster_id in ids)
    assert len(set(ids)) == len(ids)


def test_the_cluster_id_is_passed_in_the_same_argument_as_its_option() -> None:
    args = storage_format_args("-dash", Path("/tmp/server.properties"))
    assert "--cluster-id=-dash" in args
    assert "-dash" not in args
