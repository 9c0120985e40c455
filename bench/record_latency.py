"""Per-record latency, Kafka -> keyed sum -> Kafka: the runtime against Spark's real-time mode.

Issue 18, item 3, asks to compare the epoch floor with Spark's real-time mode where it
supports the same query. It does: this PySpark's real-time mode (``trigger(realTime=...)``)
plans a Kafka source, a shuffle and a streaming aggregation (its "streamline" operator, which
merges each row into the state and emits at once) into a Kafka sink. Real-time mode does not
run micro-batches, so a time per batch says nothing about it; what it is for is the time from
a record's arrival to the output that reflects it, and that is what this benchmark measures.

Every mode reads the same kind of input and runs the same query (``bench.kafka_pipeline``'s
functions): event ids written to a 4-partition topic at a steady ``--rate``, the running sum
per key (``id % 100``) and the newest id per key, each updated sum written to an output topic
as a Kafka record. Keys are a multiple of the partition count apart, so all of a key's ids are
in one partition, in the order they were written; an output record of a key whose newest id is
``n`` therefore reflects every id of that key up to ``n``. An id's latency is the time from
just before it was produced to the first output record of its key that reflects it, as a
``read_committed`` consumer in this process receives it. Only ids produced after
``--warmup-seconds`` count. The last output of every key must carry its exact sum.

Modes, each in a child process with a session of its own (the parent produces and consumes):

- ``exactly_once``: the runtime, ``KafkaSource`` -> ``groupBy().agg`` -> ``KafkaSink``, a
  snapshot every ``--snapshot-interval-ms`` into three Hazelcast members; the sink publishes a
  snapshot's output in Kafka transactions at the snapshot's 2nd phase, so its latency includes
  the wait for the next snapshot;
- ``at_least_once``: the same pipeline, each epoch's output written at once;
- ``structured_streaming``: micro-batches as fast as they go (``processingTime="0 seconds"``),
  RocksDB state with checkpoint format 2 (as real-time mode requires), at least once;
- ``real_time_mode``: ``trigger(realTime=...)``, the same state store, at least once. It
  needs a task slot for every task of every stage at once (4 source and 4 shuffle
  partitions), so its session is ``local[8]`` (slots, not cores: the machine has what it
  has); the others are ``local[2]``.

The last line printed is JSON: per mode the latency percentiles in milliseconds, and
``real_time_mode_p50_ratio`` (our AT_LEAST_ONCE median over real-time mode's: below 1 ours is
faster), ``real_time_mode_exactly_once_p50_ratio`` and ``structured_streaming_p50_ratio`` (our
AT_LEAST_ONCE median over Structured Streaming micro-batches').
Run: ``.venv/bin/python -m bench.record_latency`` (``--rate``, ``--seconds``, ``--modes``;
``--driver-read-max-records 0`` makes the runtime read every epoch with Spark's Kafka reader,
as it did before small epochs were read by the driver).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.kafka_pipeline import KEYS, PARTITIONS, STATE_PARTITIONS, Servers, servers
from spark_runtime.sources.kafka import DRIVER_READ_MAX_RECORDS

MODES = ("exactly_once", "at_least_once", "structured_streaming", "real_time_mode")
_READY = "READY"
_READY_TIMEOUT_S = 240.0
_DRAIN_TIMEOUT_S = 120.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class OutputWatch:
    """A ``read_committed`` consumer of the output topic, noting when each record arrives."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.arrivals: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
        """key -> (arrival time, newest id, sum) in arrival order."""
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
                "log_level": 3,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="output-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            if message is None:
                continue
            arrived = time.time()
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"Reading the output failed: {error}")
                continue
            row = json.loads(message.value())
            with self._lock:
                self.arrivals[int(row["key"])].append(
                    (arrived, int(row["last"]), int(row["total"]))
                )

    def newest(self) -> dict[int, int]:
        """The newest id reflected so far, per key."""
        with self._lock:
            return {key: max(a[1] for a in seen) for key, seen in self.arrivals.items() if seen}

    def close(self) -> None:
        """Stops the consumer."""
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def produce_steadily(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[int, float]:
    """Writes ids 0, 1, ... at ``rate`` a second for ``seconds``; returns each id's send time."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    sent: dict[int, float] = {}
    started = time.time()
    total = int(rate * seconds)
    for n in range(total):
        due = started + n / rate
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        sent[n] = time.time()
        producer.produce(topic, value=str(n).encode(), partition=n % PARTITIONS)
        producer.poll(0)
    producer.flush(30)
    return sent


def latencies(
    sent: dict[int, float], arrivals: dict[int, list[tuple[float, int, int]]], first_id: int
) -> list[float]:
    """Each counted id's latency in ms: from its send to the first output reflecting it.

    Raises:
        AssertionError: If an id has no output reflecting it, or a key's last sum is wrong.
    """
    result: list[float] = []
    last_id = max(sent)
    for key in range(KEYS):
        outputs = arrivals.get(key, [])
        ids = range(key, last_id + 1, KEYS)
        expected = sum(ids)
        if not outputs or max(o[2] for o in outputs) != expected:
            raise AssertionError(f"Key {key}: last sum is not {expected}")
        cursor, newest = 0, -1
        for n in ids:
            while newest < n:
                if cursor == len(outputs):
                    raise AssertionError(f"No output reflects id {n}")
                arrived, newest_there, _ = outputs[cursor]
                newest = max(newest, newest_there)
                cursor += 1
            if n >= first_id:
                result.append((arrived - sent[n]) * 1000)
    return result


def measure(bed: Servers, mode: str, ns: argparse.Namespace) -> dict[str, float]:
    """Runs one mode in a child process; returns its latency percentiles."""
    topic = bed.broker.create_topic("latency-in", partitions=PARTITIONS)
    out = bed.broker.create_topic("latency-out", partitions=PARTITIONS)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.record_latency",
            "--child",
            mode,
            "--bootstrap",
            bed.broker.bootstrap,
            "--members",
            ",".join(bed.address.members),
            "--cluster-name",
            bed.address.cluster_name,
            "--input",
            topic,
            "--output",
            out,
            "--workdir",
            str(bed.workdir),
            "--snapshot-interval-ms",
            str(ns.snapshot_interval_ms),
            "--real-time-batch",
            ns.real_time_batch,
            "--log-level",
            ns.log_level,
            "--driver-read-max-records",
            str(ns.driver_read_max_records),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        ready_by = time.monotonic() + _READY_TIMEOUT_S
        while (line := child.stdout.readline()) and line.strip() != _READY:
            if time.monotonic() > ready_by:
                raise TimeoutError(f"{mode} did not start in {_READY_TIMEOUT_S} s")
        if not line:
            raise RuntimeError(f"{mode} ended before it was ready (exit {child.wait()})")
        watch = OutputWatch(bed.broker.bootstrap, out)
        try:
            sent = produce_steadily(
                bed.broker.bootstrap, topic, ns.rate, ns.warmup_seconds + ns.seconds
            )
            last_id = max(sent)
            wanted = {key: max(range(key, last_id + 1, KEYS)) for key in range(KEYS)}
            drain_by = time.monotonic() + _DRAIN_TIMEOUT_S
            while (newest := watch.newest()) != wanted:
                if time.monotonic() > drain_by or child.poll() is not None:
                    behind = sum(1 for k in wanted if newest.get(k) != wanted[k])
                    raise RuntimeError(f"{mode}: {behind} keys without their last output")
                time.sleep(0.1)
        finally:
            watch.close()
        if ns.dump is not None:
            Path(ns.dump, f"{mode}.json").write_text(
                json.dumps({"sent": sent, "arrivals": watch.arrivals})
            )
        values = latencies(sent, watch.arrivals, int(ns.rate * ns.warmup_seconds))
    finally:
        child.stdin.close()
        try:
            child.wait(120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    figures = {
        "p50": _percentile(values, 0.5),
        "p90": _percentile(values, 0.9),
        "p99": _percentile(values, 0.99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }
    print(
        f"mode={mode} ids={len(values)} rate={ns.rate}/s "
        + " ".join(f"{name}={value:.1f}ms" for name, value in figures.items()),
        flush=True,
    )
    return {name: round(value, 1) for name, value in figures.items()} | {"ids": len(values)}


def main() -> int:
    """Starts the servers, measures every mode and prints the JSON line."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rate", type=int, default=200, help="input records a second")
    options.add_argument("--seconds", type=float, default=30.0, help="measured input")
    options.add_argument("--warmup-seconds", type=float, default=15.0)
    options.add_argument("--snapshot-interval-ms", type=int, default=1000)
    options.add_argument("--real-time-batch", default="5 seconds")
    options.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    options.add_argument(
        "--dump", help="a directory to write each mode's send and arrival times to"
    )
    options.add_argument(
        "--driver-read-max-records",
        type=int,
        default=DRIVER_READ_MAX_RECORDS,
        help="the runtime's KafkaSource setting (0: every epoch read by Spark's Kafka reader)",
    )
    options.add_argument("--log-level", default="WARNING", help="the children's log level")
    options.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    for name in ("bootstrap", "members", "cluster-name", "input", "output", "workdir"):
        options.add_argument(f"--{name}", help=argparse.SUPPRESS)
    ns = options.parse_args()
    if ns.child is not None:
        from bench.record_latency_child import run_child

        return run_child(ns, _READY)
    results: dict[str, dict[str, float]] = {}
    with servers() as bed:
        for mode in ns.modes:
            results[mode] = measure(bed, mode, ns)
    line: dict[str, object] = {"latency_ms": results}
    if "at_least_once" in results:
        ours = results["at_least_once"]["p50"]
        if "real_time_mode" in results:
            line["real_time_mode_p50_ratio"] = round(ours / results["real_time_mode"]["p50"], 3)
            if "exactly_once" in results:
                line["real_time_mode_exactly_once_p50_ratio"] = round(
                    results["exactly_once"]["p50"] / results["real_time_mode"]["p50"], 3
                )
        if "structured_streaming" in results:
            line["structured_streaming_p50_ratio"] = round(
                ours / results["structured_streaming"]["p50"], 3
            )
    line |= {
        "rate_per_s": ns.rate,
        "seconds": ns.seconds,
        "snapshot_interval_ms": ns.snapshot_interval_ms,
        "real_time_batch": ns.real_time_batch,
        "state_partitions": STATE_PARTITIONS,
        "driver_read_max_records": ns.driver_read_max_records,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
