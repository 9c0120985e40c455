"""Where the SnapshotJob resource lives in the Kubernetes API.

The operator serves it (the CRD of ``crds/``, rendered by ``snapshot_operator.api.crd``) and the
driver reads and patches it (its execution record lives in the status), so both take the
coordinates from here.
"""

from __future__ import annotations

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
