"""A real Kafka broker for the tests: one KRaft node from Maven Central's jars.

Why a real broker: the Kafka source's exactly-once rests on offsets a broker assigns and on
``read_committed`` hiding aborted and open transactions, and the sink's on transactions the
broker's coordinator commits or aborts; a stand-in would prove nothing about either. The
broker runs as one process in combined mode (``process.roles=broker,controller``), from the
jars ``make install`` fetched into ``~/.cache/snapshotjob/kafka/<version>/libs``: the storage
is formatted with ``kafka.tools.StorageTool``, then ``kafka.Kafka`` starts on two free
loopback ports (clients, controller). Its internal topics have one replica, so transactions
and consumer groups work on a single node.

Like every server of the test bed it is a :class:`~testbed.processes.ManagedProcess`, so an
interrupted run leaves no broker behind; :meth:`KafkaBroker.kill` and
:meth:`KafkaBroker.restart` are the faults the tests use.

Secured mode (``KafkaBroker(..., security=BrokerSecurity.new())``), for the tests of
``spec.kafka``: the clients' listener is ``SASL_SSL`` with SCRAM-SHA-512, its certificate
signed by the test's own CA (:mod:`testbed.kafka_tls`), and the SCRAM user is written into the
metadata log when the storage is formatted (``StorageTool format --add-scram``). A third,
PLAINTEXT listener on loopback (:attr:`KafkaBroker.internal_bootstrap`) carries the
inter-broker traffic and the test bed's own helpers (:meth:`KafkaBroker.admin`,
:meth:`KafkaBroker.create_topic`, :meth:`KafkaBroker.read_committed`), so they work the same
on either broker.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from snapshot_operator.kafka_env import kafka_env
from snapshotjob_contract.kafka import KafkaSpec
from testbed.kafka_tls import TlsMaterial, server_tls
from testbed.ports import free_port
from testbed.processes import ManagedProcess, wait_until

KAFKA_VERSION = os.environ.get("KAFKA_VERSION", "4.4.0")
"""The broker's version; ``hack/install.sh`` fetches the same one (``KAFKA_VERSION``)."""

_CACHE = Path(os.environ.get("SJ_CACHE", Path.home() / ".cache" / "snapshotjob"))

LOG4J2_CONFIG = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: org.apache.kafka.common.config
        level: WARN
"""


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory with the broker's jars.

    Raises:
        FileNotFoundError: If ``make install`` has not fetched them.
    """
    libs = _CACHE / "kafka" / version / "libs"
    if not (libs / ".complete").is_file():
        raise FileNotFoundError(f"No Kafka {version} broker jars in {libs}: run `make install`")
    return libs


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64, unpadded.

    Like Kafka's own ``Uuid.randomUuid``, it never starts with ``-``: one id in 64 would,
    and a command line reads such an id as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def storage_format_args(
    cluster_id: str, config: Path, scram_users: dict[str, str] | None = None
) -> list[str]:
    """The arguments of ``StorageTool format`` after the JVM's: ``--cluster-id=<id>`` in one.

    One argument, so that no cluster id can be taken for an option.

    Args:
        cluster_id: The new cluster's id.
        config: The broker's ``server.properties``.
        scram_users: SCRAM credentials to write into the metadata log, ``{mechanism:
            "name=<user>,password=<password>"}``-shaped as :func:`scram_credential` makes
            them; one ``--add-scram=<mechanism>=[...]`` argument each.
    """
    args = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", f"--config={config}"]
    for mechanism, credential in (scram_users or {}).items():
        args.append(f"--add-scram={mechanism}=[{credential}]")
    return args


def scram_credential(username: str, password: str) -> str:
    """The inside of ``--add-scram``'s brackets for a user: ``name=<user>,password="<pw>"``.

    Raises:
        ValueError: The name or the password holds a character the tool's parser would
            take for syntax (a quote, a comma, a bracket, ``=``) or a blank.
    """
    for what, value in (("username", username), ("password", password)):
        if not value or any(c in value for c in '"\\,=[] \t\n'):
            raise ValueError(f"A SCRAM {what} for StorageTool must be non-empty and plain text")
    return f'name={username},password="{password}"'


def _new_password() -> str:
    """32 random hex digits: url-safe and free of anything a command line or a JAAS or
    ``--add-scram`` parser would need quoted."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class BrokerSecurity:
    """How a secured :class:`KafkaBroker` checks its clients: SASL_SSL, one SCRAM user.

    Attributes:
        tls: The listener's certificate and key, and the CA clients trust.
        username: The SCRAM user, created when the storage is formatted.
        password: Its password (random unless given).
        mechanism: The SASL mechanism the listener enables.
    """

    tls: TlsMaterial
    username: str = "snapshotjob"
    password: str = field(default_factory=_new_password, repr=False)
    mechanism: str = "SCRAM-SHA-512"

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings of a client of the secured listener (with ``bootstrap.servers``
        they make a working configuration)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.pem": self.tls.ca_pem,
        }

    def job_environment(
        self, password: str | None = None, ca_pem: str | None = None
    ) -> dict[str, str]:
        """The driver's ``SJ_KAFKA_*`` variables as the operator sets them
        (:func:`~snapshot_operator.kafka_env.kafka_env`) from a ``spec.kafka`` naming this user,
        the Secret ``kafka-user`` (key ``password``) and ``kafka-tls`` (key ``ca.crt``), with
        the references resolved as the kubelet does: to this broker's password and CA, or to a
        wrong ``password`` or ``ca_pem`` if given."""
        spec = KafkaSpec.model_validate(
            {
                "securityProtocol": "SASL_SSL",
                "sasl": {
                    "mechanism": self.mechanism,
                    "username": self.username,
                    "passwordSecret": {"name": "kafka-user", "key": "password"},
                },
                "tls": {"caSecret": {"name": "kafka-tls", "key": "ca.crt"}},
            }
        )
        secrets = {
            ("kafka-user", "password"): self.password if password is None else password,
            ("kafka-tls", "ca.crt"): self.tls.ca_pem if ca_pem is None else ca_pem,
        }
        environment: dict[str, str] = {}
        for variable in kafka_env(spec):
            if "value" in variable:
                environment[variable["name"]] = variable["value"]
            else:
                ref = variable["valueFrom"]["secretKeyRef"]
                environment[variable["name"]] = secrets[(ref["name"], ref["key"])]
        return environment

    @classmethod
    def new(cls, host: str = "127.0.0.1") -> BrokerSecurity:
        """A new CA, a certificate for ``localhost`` and ``host`` (an IP address: where the
        broker is advertised), and a random password."""
        return cls(tls=server_tls(["localhost"], [host]))


class KafkaBroker:
    """One KRaft broker-and-controller with its own log directory.

    Args:
        workdir: Directory for the configuration, the data and the log.
        heap: The JVM's heap (``-Xmx``).
        partitions: ``num.partitions`` for topics created without a count.
        security: With it, the clients' listener (:attr:`bootstrap`) is SASL_SSL and a
            PLAINTEXT one (:attr:`internal_bootstrap`) serves the broker and the test bed.
    """

    def __init__(
        self,
        workdir: Path,
        heap: str = "512m",
        partitions: int = 4,
        security: BrokerSecurity | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.controller_port = free_port()
        self.internal_port = free_port() if security is not None else self.port
        self.datadir = workdir / "data"
        self.config = workdir / "server.properties"
        self.keystore = workdir / "server.pem"
        self.partitions = partitions
        self.security = security
        libs = kafka_libs()
        self._java = [
            "java",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-cp",
            f"{libs}/*",
            f"-Dlog4j2.configurationFile={workdir / 'log4j2.yaml'}",
        ]
        self.process = ManagedProcess(
            "kafka",
            [*self._java, "kafka.Kafka", str(self.config)],
            workdir / "kafka.log",
        )

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients (of the SASL_SSL listener when secured)."""
        return f"127.0.0.1:{self.port}"

    @property
    def internal_bootstrap(self) -> str:
        """``bootstrap.servers`` of the PLAINTEXT listener: the test bed's helpers' (the same
        as :attr:`bootstrap` unless secured)."""
        return f"127.0.0.1:{self.internal_port}"

    def _listener_settings(self) -> dict[str, str]:
        controller = f"CONTROLLER://127.0.0.1:{self.controller_port}"
        if self.security is None:
            return {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},{controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            }
        mechanism = self.security.mechanism
        # Advertised as the address (not a name): clients check it against the IP SAN.
        clients, internal = (
            f"SASL_SSL://127.0.0.1:{self.port}",
            f"INTERNAL://127.0.0.1:{self.internal_port}",
        )
        return {
            "listeners": f"{clients},{internal},{controller}",
            "advertised.listeners": f"{clients},{internal}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": (
                "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "sasl.enabled.mechanisms": mechanism,
            # The server side of SCRAM: the credentials are in the metadata log, the login
            # module takes no options.
            f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.client.auth": "none",
        }

    def _properties(self) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            **self._listener_settings(),
            "log.dirs": str(self.datadir),
            "num.partitions": str(self.partitions),
            # One node: the internal topics of transactions and groups get one replica.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def format_storage(self, cluster_id: str) -> None:
        """Format the log directory for a new cluster (``StorageTool format``).

        Raises:
            RuntimeError: The tool failed; the message carries its output.
        """
        self._write_config()
        scram_users = None
        if self.security is not None:
            credential = scram_credential(self.security.username, self.security.password)
            scram_users = {self.security.mechanism: credential}
        formatted = subprocess.run(
            [*self._java, *storage_format_args(cluster_id, self.config, scram_users)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if formatted.returncode != 0:
            output = f"{formatted.stdout[-3000:]}\n{formatted.stderr[-3000:]}"
            if self.security is not None:
                output = output.replace(self.security.password, "<password>")
            raise RuntimeError(
                f"Kafka storage format failed rc={formatted.returncode} cluster_id={cluster_id}:\n"
                f"{output}"
            )

    def _write_config(self) -> None:
        """Write the log configuration, ``server.properties`` and (secured) the keystore."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.yaml").write_text(LOG4J2_CONFIG)
        if self.security is not None:
            # The key, then its certificate: Kafka's PEM keystore in one file, owner-only.
            self.keystore.touch(mode=0o600)
            self.keystore.write_text(self.security.tls.keystore_pem)
        self.config.write_text(self._properties())

    def start(self, timeout: float = 90.0) -> None:
        """Format the storage (first start only) and start the broker; wait until it serves."""
        self._write_config()
        if not (self.datadir / "meta.properties").is_file():
            self.format_storage(new_cluster_id())
        self.process.start()
        wait_until(self._serves, timeout, f"Kafka broker on {self.bootstrap}", interval=0.5)

    def _serves(self) -> bool:
        if not self.process.running():
            raise RuntimeError(
                f"Kafka exited; log {self.process.log_path}:\n{self.process.log_tail()}"
            )
        try:
            metadata = self.admin().list_topics(timeout=2)
        except Exception:  # any failure means "not yet"
            return False
        return bool(metadata.brokers)

    def admin(self) -> AdminClient:
        """An admin client of this broker (on the PLAINTEXT listener when secured)."""
        return AdminClient({"bootstrap.servers": self.internal_bootstrap, "log_level": 3})

    def create_topic(self, prefix: str = "t", partitions: int | None = None) -> str:
        """Create a topic with a fresh name and return the name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        topic = NewTopic(name, partitions or self.partitions, 1)
        admin = self.admin()  # referenced until the futures are done: its handle serves them
        for future in admin.create_topics([topic]).values():
            future.result(timeout=30)
        return name

    def read_committed(self, topic: str) -> list[tuple[str | None, str]]:
        """Every committed record of ``topic`` as ``(key, value)`` text, partition after
        partition, each in offset order (what a ``read_committed`` consumer sees)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.internal_bootstrap,
                "group.id": f"check-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            records: list[tuple[str | None, str]] = []
            for partition in sorted(partitions):
                consumer.assign([TopicPartition(topic, partition, 0)])
                while True:
                    message = consumer.poll(20)
                    if message is None:
                        raise TimeoutError(f"No end of {topic}[{partition}] in 20 s")
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(f"Reading {topic}[{partition}] failed: {error}")
                        break
                    key, value = message.key(), message.value()
                    records.append((key.decode() if key else None, (value or b"").decode()))
            return records
        finally:
            consumer.close()

    def stop(self) -> None:
        """Stop the broker (SIGTERM is its controlled shutdown; then SIGKILL)."""
        self.process.stop(timeout=30)

    def kill(self) -> None:
        """SIGKILL the broker: a crash."""
        self.process.kill()

    def restart(self, timeout: float = 90.0) -> None:
        """Start the broker again on the same ports and data, after :meth:`kill` or :meth:`stop`."""
        self.start(timeout)
