"""docs/operations/upgrades.md's table of the spec fields that start a new execution, checked
against ``SnapshotJobSpec.execution_fingerprint()``: each field is changed alone and must move
the fingerprint exactly when the table's first column names it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from snapshotjob_contract import SnapshotJobSpec
from testbed.snapshotjob_crd import VALID_SPEC

DOC = (Path(__file__).resolve().parents[3] / "docs" / "operations" / "upgrades.md").read_text()

CHANGES: dict[str, dict[str, Any]] = {
    "image": {"image": "registry.example/other:2"},
    "imagePullPolicy": {"imagePullPolicy": "Always"},
    "pipeline": {"pipeline": {"module": "other_pipeline"}},
    "spark": {"spark": {"executor": {"instances": 3}}},
    "processingGuarantee": {"processingGuarantee": "AT_LEAST_ONCE"},
    "snapshotIntervalSeconds": {"snapshotIntervalSeconds": 17},
    "statePartitions": {"statePartitions": 16},
    "incrementalSnapshots": {"incrementalSnapshots": True},
    "snapshotChains": {"incrementalSnapshots": True, "snapshotChains": {"maxDeltas": 3}},
    "suspend": {"suspend": True},
    "exportSnapshot": {"exportSnapshot": {"name": "x"}},
    "exportPolicy": {"exportPolicy": {"maxCount": 2}},
    "initialSnapshotName": {"initialSnapshotName": "x"},
    "upgradeMode": {"upgradeMode": "last-snapshot"},
    "suspendOnFailure": {"suspendOnFailure": True},
    "splitBrainProtection": {"splitBrainProtection": True},
    "restartPolicy": {"restartPolicy": {"maxRestarts": 9}},
    "hazelcast": {"hazelcast": {"backupCount": 2}},
    "durableStorage": {"durableStorage": {"bucket": "snapshots"}},
    "durableRestore": {"durableRestore": {"acceptSnapshotId": 1, "insteadOfSnapshotId": 2}},
    "snapshotSigning": {"snapshotSigning": {"secretName": "keys", "keyId": "k1"}},
    "kafka": {"kafka": {"securityProtocol": "SSL"}},
    "sparkUi": {"sparkUi": {"enabled": True}},
    "podTemplate": {"podTemplate": {"metadata": {"annotations": {"rollout": "2"}}}},
    "stallDetection": {"stallDetection": {"epochTimeoutSeconds": 60}},
    "deletionPolicy": {"deletionPolicy": "Destroy"},
    "expiredOffsets": {"expiredOffsets": "Earliest"},
}
"""Each top-level spec field, changed alone from the test bed's valid spec."""
BASES = {"snapshotChains": {"incrementalSnapshots": True}}
"""What a change is compared with where the field needs another (snapshotChains needs
incrementalSnapshots)."""


def _columns() -> tuple[set[str], set[str]]:
    row = next(line for line in DOC.splitlines() if line.startswith("| `image`"))
    new, same = row.strip("|").split("|")
    # Only the cells' own names: nested ones are in parentheses, e.g. `pipeline` (`module`).
    names = [set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell))) for cell in (new, same)]
    return names[0], names[1]


def _fingerprint(changes: dict[str, Any]) -> str:
    return SnapshotJobSpec.model_validate({**VALID_SPEC, **changes}).execution_fingerprint()


def test_the_table_names_every_spec_field_once() -> None:
    new, same = _columns()
    fields = {info.alias or name for name, info in SnapshotJobSpec.model_fields.items()}
    assert not new & same, new & same
    assert new | same == fields == set(CHANGES)


def test_only_the_drivers_own_stall_timeouts_start_a_new_execution() -> None:
    assert _fingerprint({}) == _fingerprint({"stallDetection": {"intervals": 9, "minSeconds": 60}})
    assert _fingerprint({}) != _fingerprint({"stallDetection": {"sinkTimeoutSeconds": 60}})


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_field_starts_a_new_execution_exactly_when_the_table_says_so(field: str) -> None:
    new, _ = _columns()
    base = BASES.get(field, {})
    moved = _fingerprint(base) != _fingerprint({**base, **CHANGES[field]})
    assert moved == (field in new), field
