"""The guides' tables that name contract values name real ones, all of them where they list a set.

The generated reference pages (``test_reference_docs.py``) hold the full lists; the guides
keep a few short tables of their own where a reader needs them at hand: the ``snapshot``
subcommands' exit codes in the durable snapshots guide, the export phases and their reasons in
the exports guide, the Kafka clients' settings ``spec.kafka`` becomes in the Kafka security
guide. These tests read those tables and hold them to the contract's enums and to the
runtime's translation (``KafkaSecurity``), so a renamed reason, a renumbered exit code or a
changed client setting cannot leave a guide telling the reader something the code no longer
says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.exports import ExportPhase, ExportReason
from snapshotjob_contract.kafka import KafkaSaslMechanism, KafkaSecurityProtocol
from spark_runtime.kafka_security import KafkaSecurity

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"


def table_rows(page: Path, header: str) -> list[list[str]]:
    """The body rows of the table whose header row starts with ``header``."""
    rows: list[list[str]] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(header):
            inside = True
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif inside:
            break
    assert rows, f"{page.relative_to(DOCS)} has no table headed {header!r}"
    return rows


def test_the_snapshot_commands_exit_codes_are_driver_exits_with_their_meaning() -> None:
    rows = table_rows(DOCS / "guides" / "durable-snapshots.md", "| command | what it shows |")
    # What spark_runtime/snapshot_command.py returns on a failure.
    reported = {
        DriverExit.BAD_INPUT,
        DriverExit.SNAPSHOT_CORRUPTED,
        DriverExit.SNAPSHOT_NOT_FOUND,
        DriverExit.TRANSIENT_FAILURE,
        DriverExit.SNAPSHOT_INCOMPATIBLE,
    }
    seen: set[int] = set()
    for command, _, exits in rows:
        for code in (int(found) for found in re.findall(r"\b(\d+)\b", exits)):
            seen.add(code)
            assert code == 0 or code in {e.value for e in DriverExit}, (
                f"{command}: exit {code} is no DriverExit (snapshotjob_contract/exits.py)"
            )
    missing = {e.value for e in reported} - seen
    assert not missing, f"docs/guides/durable-snapshots.md: no row gives exit {sorted(missing)}"


def test_the_export_phase_table_lists_every_phase_and_only_real_reasons() -> None:
    rows = table_rows(DOCS / "guides" / "exports.md", "| Phase | When |")
    phases = {row[0].strip("`") for row in rows}
    assert phases == {phase.value for phase in ExportPhase}
    named = {name for row in rows for name in re.findall(r"`([A-Z][A-Za-z]+)`", " ".join(row))}
    unknown = named - {reason.value for reason in ExportReason} - phases
    assert not unknown, f"docs/guides/exports.md names reasons the code does not have: {unknown}"


def test_the_kafka_security_table_names_every_setting_each_client_gets_and_from_what() -> None:
    rows = table_rows(DOCS / "guides" / "kafka-security.md", "| `spec.kafka` |")
    pem = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
    # Each field of spec.kafka, and a value that shows where it went.
    given = {
        "securityProtocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "user-in-table",
        "sasl.passwordSecret": "password-in-table",
        "tls.caSecret": pem,
    }
    security = KafkaSecurity(
        protocol=KafkaSecurityProtocol.SASL_SSL,
        mechanism=KafkaSaslMechanism.SCRAM_SHA_256,
        username=given["sasl.username"],
        password=given["sasl.passwordSecret"],
        ca_pem=pem,
    )
    assert [row[0].strip("`") for row in rows] == list(given), "one row per field of spec.kafka"
    clients = {
        "librdkafka": (1, security.librdkafka_settings()),
        "Java (as Spark options)": (
            2,
            {f"kafka.{key}": value for key, value in security.java_settings().items()},
        ),
    }
    for client, (column, settings) in clients.items():
        named: set[str] = set()
        for row in rows:
            field = row[0].strip("`")
            # A setting is a code span `key` or `key=value` (a value the code sets as it is).
            for key, _, literal in (
                span.partition("=")
                for span in re.findall(r"`([a-z][a-z.]*\.[a-z.]+(?:=[A-Z]+)?)`", row[column])
            ):
                named.add(key)
                assert key in settings, f"{client}: the table names {key}, the code sets none"
                if literal:
                    assert settings[key] == literal, f"{client}: {key} is {settings[key]!r}"
                else:
                    assert given[field] in settings[key], f"{client}: {key} does not carry {field}"
        assert named == set(settings), f"{client}: the table leaves out {set(settings) - named}"
