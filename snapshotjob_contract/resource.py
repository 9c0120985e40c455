"""Where the SnapshotJob resource lives in the Kubernetes API.

The operator serves it (the CRD of ``crds/``, rendered by ``snapshot_operator.api.crd``) and the
driver reads and patches it (its execution record lives in the status), so both take the
coordinates from here, and the rule on the job's name that the CRD enforces at admission.
"""

from __future__ import annotations

from snapshotjob_contract.base import LABEL_VALUE_MAX_LENGTH, CrossFieldRule

GROUP = "snapshotjob.io"
"""The API group."""
VERSION = "v1alpha1"
"""The one served and stored version."""
API_VERSION = f"{GROUP}/{VERSION}"
"""``apiVersion`` of a SnapshotJob object."""
KIND = "SnapshotJob"
"""``kind`` of a SnapshotJob object."""
PLURAL = "snapshotjobs"
"""The resource name in URLs and RBAC rules."""
SINGULAR = "snapshotjob"
"""The singular name kubectl accepts."""

MAX_NAME_LENGTH = LABEL_VALUE_MAX_LENGTH
"""The longest SnapshotJob name the operator can build every object of the job from.

Derived from what the operator makes of the name (``snapshot_operator.manifests``): it labels
every object it creates for the job with ``snapshotjob.io/job: <name>``, and a label value has at
most 63 characters. The other names it derives allow more: the driver's ServiceAccount, Role and
RoleBinding are ``<name>-driver`` (object names up to 253), and the driver Pod's name is
shortened with a digest to a DNS label. A longer name would be admitted by the API server (a
SnapshotJob's name may have 253 characters) and then fail at every start, so the CRD refuses it
(:data:`NAME_RULE`); ``tests/unit/operator/test_manifests.py`` checks that every object built
from a name of this length is valid and that one more character is not.
"""

NAME_RULE = CrossFieldRule(
    cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
    message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the operator labels "
    "the job's driver Pod, ServiceAccount and RBAC objects with it, and label values are at "
    f"most {LABEL_VALUE_MAX_LENGTH}; choose a shorter name",
    holds=lambda name: len(name) <= MAX_NAME_LENGTH,
)
"""The rule on ``metadata.name``, once for CEL (a root rule of the CRD, where ``self.metadata``
is visible) and once for Python (the operator re-checks jobs admitted before the rule existed
and reports them as ``InvalidSpec``); ``holds`` takes the name."""
