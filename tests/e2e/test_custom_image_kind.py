"""A user's own image on kind: ``examples/custom-image`` built, pushed and run as documented.

Why this test exists: ``docs/getting-started/your-pipeline.md`` promises a path from a pipeline
module to a running SnapshotJob (a Dockerfile ``FROM`` the runtime image, a dependency the runtime
image does not have, the manifest with its DSN from a Secret). This test walks it: the
``custom_image`` fixture builds ``examples/custom-image/Dockerfile`` with ``docker build``
(``hack/images/build.sh custom``, cached by input hash, and done ahead by the cluster tier's
preparation) and pushes it to the test bed's registry; the test creates the Secret the manifest
names, applies ``examples/custom-image/snapshotjob.yaml`` (only the input made shorter, the
namespace the release's and the image the pushed one, which the job's Pods pull with the
chart's ``jobs.imagePullSecrets``), and checks both PostgreSQL tables against the result
computed here with the example's own ``release_line``: the ``packaging`` dependency ran in the
executors' Python workers, which only the user image has.

The build installs the dependency from the wheels ``make install`` downloaded, with the
Dockerfile's documented ``PIP_INSTALL_ARGS``: the build container here does not trust the
machine's egress proxy, and a test reaches no index.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.release import CUSTOM_IMAGE, Release, Step, psql, wait_phase
from tests.script_modules import load_script

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom-image"
END, RATE, INSTALLS = 600, 100, 100
"""The input, shorter than the example's 6000 heartbeats at 20 per second."""


def _example_module() -> Any:
    return load_script("my_pipeline", EXAMPLE / "my_pipeline.py")


@pytest.mark.usefixtures("postgres")
def test_the_documented_user_image_runs_its_own_dependency_on_the_executors(
    release: Release, custom_image: str
) -> None:
    manifest = yaml.safe_load((EXAMPLE / "snapshotjob.yaml").read_text())
    job = manifest["metadata"]["name"]
    assert manifest["spec"]["image"] == CUSTOM_IMAGE
    # As pushed to the test bed's registry; the chart gives the job's Pods its pull Secret.
    manifest["spec"] |= {"image": custom_image, "imagePullPolicy": "IfNotPresent"}
    args = manifest["spec"]["pipeline"]["args"]
    assert args["dsn"] == "$(PG_DSN)", "the example keeps its credentials in a Secret"
    args |= {"end": END, "rows_per_second": RATE, "installs": INSTALLS}
    manifest["metadata"]["namespace"] = release.namespace
    secret = manifest["spec"]["podTemplate"]["spec"]["containers"][0]["env"][0]
    secret_name = secret["valueFrom"]["secretKeyRef"]["name"]
    release.kubectl(
        "create",
        "secret",
        "generic",
        secret_name,
        "--from-literal=DSN=postgresql://snapshotjob:snapshotjob@postgres:5432/snapshotjob",
    )
    try:
        with Step("custom-image-completed"):
            release.apply(manifest)
            release.jobs.append(job)
            done = wait_phase(release, job, {"COMPLETED"}, timeout=480)
        assert done["status"]["executionRecord"]["snapshotId"] >= 1

        example = _example_module()
        lines = [
            example.release_line(example.VERSIONS[n % len(example.VERSIONS)]) for n in range(END)
        ]
        heartbeats = Counter(lines)
        installs = Counter(
            line for line, _ in {(line, n % INSTALLS) for n, line in enumerate(lines)}
        )
        assert "unknown" in heartbeats, "the example's input includes a string that is no version"
        table = args["table"]
        got = {
            row[0]: int(row[1])
            for row in psql(release, f"SELECT release_line, heartbeats FROM {table}_heartbeats")
        }
        assert got == dict(heartbeats)
        got = {
            row[0]: int(row[1])
            for row in psql(release, f"SELECT release_line, installs FROM {table}_installs")
        }
        assert got == dict(installs)
    finally:
        release.kubectl("delete", "secret", secret_name, "--ignore-not-found")
