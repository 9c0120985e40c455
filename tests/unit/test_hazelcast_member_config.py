"""The member config of a member in a network host binds to and advertises the host's address."""

from __future__ import annotations

import json

from testbed.hazelcast import member_config


def test_member_in_a_host_uses_its_address() -> None:
    addresses = ["10.123.4.10:5701", "10.123.4.11:5701"]
    config = json.loads(
        member_config(
            "c",
            [5701, 5701],
            5701,
            1,
            ip="10.123.4.11",
            member_addresses=addresses,
            max_no_heartbeat_seconds=10,
        )
    )["hazelcast"]
    network = config["network"]
    assert network["public-address"] == "10.123.4.11:5701"
    assert network["interfaces"] == {"enabled": True, "interfaces": ["10.123.4.11"]}
    assert network["join"]["tcp-ip"]["member-list"] == addresses
    assert config["properties"]["hazelcast.max.no.heartbeat.seconds"] == 10


def test_member_on_loopback_is_unchanged() -> None:
    config = json.loads(member_config("c", [15701, 15702], 15702, 1))["hazelcast"]
    network = config["network"]
    assert network["public-address"] == "127.0.0.1:15702"
    assert network["interfaces"]["interfaces"] == ["127.0.0.1"]
    assert network["join"]["tcp-ip"]["member-list"] == ["127.0.0.1:15701", "127.0.0.1:15702"]
    assert config["properties"]["hazelcast.max.no.heartbeat.seconds"] == 60
