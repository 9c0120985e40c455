"""The secret-leak search of the end-to-end tests: Secret values a job was given, searched for
in every log line of its Pods, the operator's and the store's, its status, exports, Events and
the operator's metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from snapshotjob_contract.observability import OPERATOR_METRICS_PORT
from tests.e2e.release import Release


@dataclass
class SecretSearch:
    """The Secret values one job was given, and what was gathered to search them in."""

    values: dict[str, str]
    seen: list[str] = field(default_factory=list)

    def search(self, release: Release, job: str) -> list[str]:
        """Where any value shows: ``<what> has <secret>`` for each hit."""
        texts = {f"text {i}": text for i, text in enumerate(self.seen)}
        pods = [
            *release.pods(f"snapshotjob.io/job={job}"),
            *release.pods("app.kubernetes.io/component in (operator,hazelcast)"),
        ]
        for pod in pods:
            name = pod["metadata"]["name"]
            for container in pod["spec"]["containers"]:
                texts[f"log {name}/{container['name']}"] = release.kubectl(
                    "logs", name, "-c", container["name"], timeout=60
                )
        texts["job"] = release.kubectl("get", "snapshotjob", job, "-o", "json")
        texts["exports"] = release.kubectl("get", "snapshotjobexports", "-o", "json")
        texts["events"] = release.kubectl("get", "events", "-o", "json")
        operators = release.pods("app.kubernetes.io/component=operator")
        for pod in operators:
            name = pod["metadata"]["name"]
            texts[f"metrics {name}"] = release.scrape(name, OPERATOR_METRICS_PORT)
        # Every Pod's logs (one container at least), the job, exports, Events, each metrics.
        least = len(self.seen) + len(pods) + 3 + len(operators)
        assert operators and len(texts) >= least, sorted(texts)
        return [
            f"{where} has {what}"
            for where, text in texts.items()
            for what, value in self.values.items()
            if value in text
        ]
