"""The epoch floor: what a near-empty epoch costs, against a Structured Streaming micro-batch.

``bench.overhead`` runs each pipeline once, right after a short warm-up, so its first runs
also pay the JVM's just-in-time compilation and the Python workers' start: one
NONE run took 606 ms per epoch first and 379 ms the second time. This benchmark measures
the floor the issue asks for (``epoch_floor_ratio``: Structured Streaming's per-batch time
over ours, >= 1 meaning ours is not slower) on warm code, in rounds:

- one ``local[2]`` session for everything, with three Hazelcast members (the test bed's
  launchers) as the snapshot store;
- the query is ``bench.overhead``'s: sequence -> running sum by key (1000 keys) -> a sink that
  counts the output, ``--rows-per-epoch`` rows per epoch (100 by default: almost no data);
- ours under NONE and under EXACTLY_ONCE with a snapshot every second (each epoch's output
  buffered and counted at the next snapshot, the state written to the store), and Structured
  Streaming with the RocksDB state store checkpointing every batch into a ``foreachBatch``
  sink that counts each batch's output;
- Structured Streaming twice: in a session of its own with Spark's defaults, as its users
  run it (``structured_streaming``; adaptive query execution on, which Structured Streaming
  turns off for its own batches but not for what ``foreachBatch`` runs), and in the
  runtime's session, whose settings plan without adaptive execution
  (``structured_streaming_adaptive_off``). ``epoch_floor_ratio`` is against the first,
  ``epoch_floor_ratio_adaptive_off`` against the second;
- a warm-up run of each first, then ``--rounds`` rounds running the three in turn; a run's
  figure is its wall time over its epochs (batches), starts and final snapshot included, as
  ``bench.overhead`` counts them, and each figure reported is the median over the rounds.

The last line printed is JSON. Run: ``.venv/bin/python -m bench.epoch_floor``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from bench.overhead import _session, bench_servers, run_pipeline, run_structured_streaming
from snapshotjob_contract.spec import ProcessingGuarantee

_OURS = {"none": ProcessingGuarantee.NONE, "exactly_once": ProcessingGuarantee.EXACTLY_ONCE}
"""Our runs by name; the other two, ``structured_streaming*``, are Spark's."""


def main() -> int:
    """Starts the servers, runs the warm-up and the rounds, prints the JSON line."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rows", type=int, default=4000)
    options.add_argument("--rows-per-epoch", type=int, default=100)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument(
        "--adaptive",
        choices=("session", "on", "off"),
        default="session",
        help="spark.sql.adaptive.enabled for every run: as the runtime's session sets it, "
        "or forced on or off (Structured Streaming turns it off for its own batches anyway)",
    )
    ns = options.parse_args()
    epochs = ns.rows // ns.rows_per_epoch
    runs = (*_OURS, "structured_streaming", "structured_streaming_adaptive_off")
    per_epoch_ms: dict[str, list[float]] = {run: [] for run in runs}
    with bench_servers("sj-floor") as servers:
        spark = _session()
        if ns.adaptive != "session":
            spark.conf.set("spark.sql.adaptive.enabled", "true" if ns.adaptive == "on" else "false")
        # The same SparkContext, its own SQL settings: Spark's default for adaptive execution.
        spark_defaults = spark.newSession()
        spark_defaults.conf.set(
            "spark.sql.adaptive.enabled", "false" if ns.adaptive == "off" else "true"
        )

        def run(name: str) -> float:
            if name.startswith("structured_streaming"):
                session = spark_defaults if name == "structured_streaming" else spark
                seconds = run_structured_streaming(
                    session, servers.workdir, ns.rows, ns.rows_per_epoch
                )
            else:
                seconds = run_pipeline(
                    spark,
                    servers.address,
                    servers.store,
                    servers.workdir,
                    None,
                    _OURS[name],
                    ns.rows,
                    ns.rows_per_epoch,
                )
            return float(seconds * 1000 / epochs)

        for name in runs:
            run(name)
        print("warm-up done", flush=True)
        for round_no in range(ns.rounds):
            for name in runs:
                per_epoch_ms[name].append(run(name))
            print(
                f"round {round_no + 1} "
                + " ".join(f"{name}_ms={per_epoch_ms[name][-1]:.0f}" for name in runs),
                flush=True,
            )
        spark_adaptive = {
            "runtime_session": spark.conf.get("spark.sql.adaptive.enabled"),
            "structured_streaming": spark_defaults.conf.get("spark.sql.adaptive.enabled"),
        }
        spark.stop()
    median = {name: statistics.median(values) for name, values in per_epoch_ms.items()}
    print(
        json.dumps(
            {
                "epoch_floor_ratio": round(
                    median["structured_streaming"] / median["exactly_once"], 3
                ),
                "epoch_floor_ratio_none": round(median["structured_streaming"] / median["none"], 3),
                "epoch_floor_ratio_adaptive_off": round(
                    median["structured_streaming_adaptive_off"] / median["exactly_once"], 3
                ),
                "median_ms_per_epoch": {name: round(value, 1) for name, value in median.items()},
                "ms_per_epoch": {
                    name: [round(v, 1) for v in values] for name, values in per_epoch_ms.items()
                },
                "epochs": epochs,
                "rows_per_epoch": ns.rows_per_epoch,
                "rounds": ns.rounds,
                "adaptive": spark_adaptive,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
