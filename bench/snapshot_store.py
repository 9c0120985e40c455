"""Benchmark: the snapshot store against the physical limit of the same client and cluster.

Writes and restores the same state (64 and 512 MiB in 1 MiB chunks) through
:class:`~snapshot_store.hazelcast.HazelcastSnapshotStore`, the way a snapshot does
(strict single-key puts, validation record, strict validation before the restore), and the
same bytes through the fastest plain client method, measured in the same run against the same
3-member cluster: for writes the faster of parallel async ``set`` and batched ``put_all``, for
reads the faster of parallel ``get`` and batched ``get_all``. Each figure is the best of
``--repeat`` rounds in which the methods take turns.

The store's restore verifies every chunk against the xxh3 checksum in its validation record,
as a real restore does; the same restore without the verification, measured in the same
rounds, gives the checksum's cost as a share of restore bandwidth (``checksum_cost``). That
difference is small enough to drown in the noise of a shared machine, so the time spent in
xxh3 alone over the same chunks is measured too: ``checksum_share`` is that time as a share
of the verified restore's, the cost the verification would have if nothing overlapped it.

The validation record is signed (``spec.snapshotSigning``: HMAC-SHA256 over the record,
``snapshot_protocol.signing``), and a signed restore checks the MAC before it reads any chunk,
as restore step 4 does: ``mac_cost`` is the signed restore's loss of bandwidth against the
verified one's, measured in the same rounds (noise included), and ``mac_share`` the time of
the MAC check alone as a share of the verified restore's (goal: at most 5 %).

Run: ``.venv/bin/python bench/snapshot_store.py`` (``--sizes 64`` for a quick pass). Prints
the figures and ratios; the last line is JSON with ``write_ratio`` and ``restore_ratio``
(the smallest over the sizes), ``checksum_cost``, ``checksum_share``, ``mac_cost`` and
``mac_share`` (the largest).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hazelcast.client import HazelcastClient

from snapshot_protocol.chunks import (
    ChunkDescriptor,
    ChunkKey,
    ValidationRecord,
    checksum,
    validate_snapshot,
    verify_chunk,
)
from snapshot_protocol.signing import SnapshotKeys, check_signature, sign
from snapshot_store.hazelcast import DEFAULT_WINDOW, SOCKET_OPTIONS, HazelcastSnapshotStore
from snapshotjob_contract import snapshot_map_name
from testbed.hazelcast import HazelcastCluster

MIB = 1024 * 1024
BATCH = 16  # entries per put_all / get_all call


def best_times(
    repeat: int, methods: dict[str, tuple[Callable[[], None], Callable[[], None]]]
) -> dict[str, float]:
    """Fastest wall time of each method over ``repeat`` rounds.

    Each method is ``(before, run)``; only ``run`` is timed. The methods take turns within
    every round, starting each round with the next one, so a burst of load on the machine and
    the cost of being first hit them alike.
    """
    best = dict.fromkeys(methods, float("inf"))
    names = list(methods)
    for round_ in range(repeat):
        # Each round starts with another method, so none always pays for the round's start.
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            before, run = methods[name]
            before()
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def windowed(
    futures: Iterable[Any],
    window: int = DEFAULT_WINDOW,
    each: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """Wait for futures, keeping at most ``window`` in flight (the plain client's best use).

    Args:
        futures: The operations, started as they are drawn.
        window: Operations in flight at most.
        each: Applied to every result as it arrives; what it returns is kept instead (``len``
            keeps the sizes of values read, not the values).

    Returns:
        The results (or what ``each`` made of them), in order.
    """
    keep = each if each is not None else _same
    results: list[Any] = []
    pending: list[Any] = []
    for future in futures:
        pending.append(future)
        if len(pending) >= window:
            results.append(keep(pending.pop(0).result()))
    results.extend(keep(f.result()) for f in pending)
    return results


def _same(value: Any) -> Any:
    return value


# The plain client's fastest methods, the physical limit the store is measured against
# (bench/scale_curve.py measures the runtime against the same ones). ``plain_map`` is a
# non-blocking map of a client made without fail-on-indeterminate.


def put_each(plain_map: Any, items: Mapping[str, bytes | bytearray]) -> None:
    """Puts every item with its own async ``set``, a window of them in flight."""
    windowed(plain_map.set(name, value) for name, value in items.items())


def put_batched(plain_map: Any, items: Mapping[str, bytes | bytearray], batch: int = BATCH) -> None:
    """Puts the items with ``put_all`` calls of ``batch`` entries, a window of them in flight."""
    names = list(items)
    windowed(
        plain_map.put_all({name: items[name] for name in names[i : i + batch]})
        for i in range(0, len(names), batch)
    )


def get_each(plain_map: Any, names: Sequence[str]) -> int:
    """Reads every key with its own ``get``, a window in flight; returns the bytes read.

    Each value is dropped as it arrives, so reading gigabytes holds a window of them only.
    """
    return sum(windowed((plain_map.get(name) for name in names), each=len))


def get_batched(plain_map: Any, names: Sequence[str], batch: int = BATCH) -> int:
    """Reads the keys with ``get_all`` calls of ``batch`` keys; returns the bytes read."""
    return sum(
        windowed(
            (plain_map.get_all(names[i : i + batch]) for i in range(0, len(names), batch)),
            each=lambda part: sum(len(value) for value in part.values()),
        )
    )


def measure(
    cluster_client: HazelcastClient, plain_client: HazelcastClient, size_mib: int, repeat: int
) -> dict[str, float]:
    """MB/s of every method for one state size."""
    pool = [bytearray(os.urandom(MIB)) for _ in range(min(size_mib, 64))]
    keys = [ChunkKey(1, "state", p, 0) for p in range(size_mib)]
    chunks = [(key, pool[i % len(pool)]) for i, key in enumerate(keys)]
    plain_items = {str(k): v for k, v in chunks}
    store = HazelcastSnapshotStore(cluster_client)
    # Named like a job's map with backupCount 1, so the members give it one backup.
    snapshot_map = snapshot_map_name(f"bench-{size_mib}", 0, 1)
    plain_map: Any = plain_client.get_map(f"__sj.bench.plain-{size_mib}")
    signing_keys = SnapshotKeys("bench", {"bench": os.urandom(48)})
    record = sign(
        ValidationRecord(
            1,
            tuple(ChunkDescriptor.of(key, data, 1) for key, data in chunks),
            size_mib * MIB,
            size_mib,
            0,
            "bench",
        ),
        signing_keys,
    )

    def clear_store() -> None:
        store.clear(snapshot_map)

    def clear_plain() -> None:
        plain_map.clear().result()

    def store_write() -> None:
        store.put_chunks(snapshot_map, chunks)
        store.put_validation_record(snapshot_map, record)

    def plain_set() -> None:
        put_each(plain_map, plain_items)

    def plain_put_all() -> None:
        put_batched(plain_map, plain_items)

    def store_restore() -> None:
        checked = validate_snapshot(store, snapshot_map, 1)
        data = store.read_chunks(snapshot_map, checked.chunk_keys)
        for chunk, value in zip(checked.chunks, data, strict=True):
            verify_chunk(snapshot_map, 1, chunk, value)
        assert sum(len(d) for d in data) == size_mib * MIB

    def store_restore_signed() -> None:
        checked = validate_snapshot(store, snapshot_map, 1)
        check_signature(snapshot_map, checked, signing_keys)
        data = store.read_chunks(snapshot_map, checked.chunk_keys)
        for chunk, value in zip(checked.chunks, data, strict=True):
            verify_chunk(snapshot_map, 1, chunk, value)
        assert sum(len(d) for d in data) == size_mib * MIB

    def mac_only() -> None:
        check_signature(snapshot_map, record, signing_keys)

    def store_restore_unverified() -> None:
        checked = validate_snapshot(store, snapshot_map, 1)
        data = store.read_chunks(snapshot_map, checked.chunk_keys)
        assert sum(len(d) for d in data) == size_mib * MIB

    def hash_only() -> None:
        for _, value in chunks:
            checksum(value)

    def plain_get() -> None:
        assert get_each(plain_map, list(plain_items)) == size_mib * MIB

    def plain_get_all() -> None:
        assert get_batched(plain_map, list(plain_items)) == size_mib * MIB

    def nothing() -> None:
        return None

    mb = size_mib * MIB / 1e6
    writes = best_times(
        repeat,
        {
            "store_write": (clear_store, store_write),
            "plain_set": (clear_plain, plain_set),
            "plain_put_all": (clear_plain, plain_put_all),
        },
    )
    store_write()  # the state to restore; the plain map holds it already
    reads = best_times(
        repeat,
        {
            "store_restore": (nothing, store_restore),
            "store_restore_signed": (nothing, store_restore_signed),
            "mac_only": (nothing, mac_only),
            "store_restore_unverified": (nothing, store_restore_unverified),
            "xxh3_only": (nothing, hash_only),
            "plain_get": (nothing, plain_get),
            "plain_get_all": (nothing, plain_get_all),
        },
    )
    figures = {name: mb / seconds for name, seconds in {**writes, **reads}.items()}
    clear_store()
    clear_plain()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512], help="MiB of state")
    parser.add_argument("--repeat", type=int, default=5, help="passes per figure (best counts)")
    parser.add_argument("--heap", default="2g", help="JVM heap of each member")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    workdir = Path(tempfile.mkdtemp(prefix="sj-bench-store-"))
    # A long backup time-out: on a loaded machine a slow ack must cost time here, not fail
    # the run (failing is the protocol's job, tested elsewhere).
    cluster = HazelcastCluster(workdir, heap=args.heap, backup_timeout_ms=60_000)
    results: dict[str, Any] = {"sizes_mib": args.sizes}
    try:
        cluster.start()
        # Both clients get the store's socket buffers, so the ratio compares methods only.
        strict = cluster.client(fail_on_indeterminate=True, socket_options=SOCKET_OPTIONS)
        plain = cluster.client(fail_on_indeterminate=False, socket_options=SOCKET_OPTIONS)
        write_ratios, restore_ratios, checksum_costs, checksum_shares = [], [], [], []
        mac_costs, mac_shares = [], []
        print(f"Hazelcast {len(cluster.nodes)} members, backup-count 1, logs in {workdir}")
        for size in args.sizes:
            f = measure(strict, plain, size, args.repeat)
            plain_write = max(f["plain_set"], f["plain_put_all"])
            plain_read = max(f["plain_get"], f["plain_get_all"])
            write_ratio = f["store_write"] / plain_write
            restore_ratio = f["store_restore"] / plain_read
            checksum_cost = 1 - f["store_restore"] / f["store_restore_unverified"]
            checksum_share = f["store_restore"] / f["xxh3_only"]
            checksum_shares.append(checksum_share)
            mac_cost = 1 - f["store_restore_signed"] / f["store_restore"]
            mac_share = f["store_restore"] / f["mac_only"]
            mac_costs.append(mac_cost)
            mac_shares.append(mac_share)
            write_ratios.append(write_ratio)
            restore_ratios.append(restore_ratio)
            checksum_costs.append(checksum_cost)
            print(
                f"{size:4d} MiB  write: store {f['store_write']:7.1f} MB/s, plain set "
                f"{f['plain_set']:7.1f}, put_all {f['plain_put_all']:7.1f} -> ratio "
                f"{write_ratio:.2f}"
            )
            print(
                f"{size:4d} MiB  restore: store {f['store_restore']:7.1f} MB/s, plain get "
                f"{f['plain_get']:7.1f}, get_all {f['plain_get_all']:7.1f} -> ratio "
                f"{restore_ratio:.2f}"
            )
            print(
                f"{size:4d} MiB  checksum: restore verified {f['store_restore']:7.1f} MB/s, "
                f"unverified {f['store_restore_unverified']:7.1f}, xxh3 alone "
                f"{f['xxh3_only']:7.1f} -> cost {checksum_cost:.1%} of restore bandwidth "
                f"(measured), xxh3 time {checksum_share:.1%} of the restore's"
            )
            print(
                f"{size:4d} MiB  record MAC: restore signed {f['store_restore_signed']:7.1f} MB/s "
                f"against verified {f['store_restore']:7.1f} -> cost {mac_cost:.1%} of restore "
                f"bandwidth (measured), MAC check time {mac_share:.3%} of the restore's "
                "(goal <= 5 %)"
            )
            results[f"{size}mib"] = {k: round(v, 1) for k, v in f.items()}
        results["write_ratio"] = round(min(write_ratios), 3)
        results["restore_ratio"] = round(min(restore_ratios), 3)
        results["checksum_cost"] = round(max(checksum_costs), 4)
        results["checksum_share"] = round(max(checksum_shares), 4)
        results["mac_cost"] = round(max(mac_costs), 4)
        results["mac_share"] = round(max(mac_shares), 6)
    finally:
        cluster.stop()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
