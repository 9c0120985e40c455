#!/usr/bin/env bash
# Prepares the cluster tier ahead of time: the e2e, PostgreSQL and user (examples/custom-image)
# images, the operator's, the members' and the test servers', the kind cluster, the test bed's registry (hack/kube/registry.sh) with those images
# and the packaged chart pushed to it. hack/test.sh (`make test`) starts it in
# the background while the static checks and the earlier tiers run, so these minutes overlap
# them instead of adding to the run.
#
# Every step is one the session fixtures take anyway (tests/fixtures/kube.py,
# tests/e2e/conftest.py), and they find it done: the images are cached by their inputs'
# hash, the cluster is up, and a push of layers the registry holds is a request each. A
# cluster created here belongs to the test session: its control-plane container's id goes to the
# file named by the first argument, and the kind_cluster fixture takes the cluster over
# (deletes it at the end) when that id matches (testbed/kind.py).
#
# Either way the cluster then waits frozen (`cluster.sh pause`) for the cluster tier, which
# runs last: idle, its three nodes would take about a seventh of the machine from the
# integration tier. The kind_cluster fixture resumes it (testbed/kind.py); the second file
# records the pause, so that hack/test.sh resumes a cluster that was already there when no
# test session did (the checks failed, or no cluster test was selected).
#
# Usage: hack/e2e-prepare.sh OWNED_FILE PAUSED_FILE
set -euo pipefail
cd "$(dirname "$0")/.."
owned="${1:?usage: hack/e2e-prepare.sh OWNED_FILE PAUSED_FILE}"
paused="${2:?usage: hack/e2e-prepare.sh OWNED_FILE PAUSED_FILE}"
# shellcheck source=hack/kube/lib.sh
source hack/kube/lib.sh
name="${KIND_CLUSTER_NAME}"
start=$(date +%s)
# On a cold machine the test session builds the Kubernetes binaries and the node image
# itself (tests/fixtures/kube.py, testbed/artifacts.py); building them here at the same time
# would race it on the same files, so the preparation is then left to the session.
# The binaries `cluster.sh up` needs (its need_bins, which tests/unit/test_artifacts.py reads),
# and the registry's and helm, which registry.sh runs.
for bin in kind kubectl kubeadm kubelet kube-proxy coredns pause etcd crictl flanneld \
  runc-capfilter registry helm; do
  if [[ ! -x "${KUBE_BIN_DIR}/${bin}" ]]; then
    echo "==> Cluster tier preparation skipped: ${KUBE_BIN_DIR}/${bin} is not built yet"
    exit 0
  fi
done
ensure_docker
if ! docker image inspect "${NODE_IMAGE}" >/dev/null 2>&1; then
  echo "==> Cluster tier preparation skipped: the node image ${NODE_IMAGE} is not built yet"
  exit 0
fi
# The jobs' images (e2e, custom), the operator's, the members' and the test servers'; no SBOMs
# (tests/integration/test_images.py writes those).
service_images=(operator member test-kafka-broker test-s3proxy)
SBOM=0 bash hack/images/build.sh e2e postgres custom "${service_images[@]}"
if ! bash hack/kube/cluster.sh status; then
  # Marked before it exists: a preparation stopped half way still leaves its cluster to delete.
  echo creating >"${owned}"
  bash hack/kube/cluster.sh up
  docker inspect --format '{{.Id}}' "${name}-control-plane" >"${owned}"
else
  # One left paused by an interrupted make test: frozen nodes cannot be told to trust the
  # registry.
  bash hack/kube/cluster.sh resume
fi
# The nodes pull from the registry with the tests' pull Secrets; the session pushes again
# and finds every layer there.
bash hack/kube/registry.sh up
bash hack/kube/registry.sh connect
# shellcheck source=hack/images/images.env
source hack/images/images.env
bash hack/kube/registry.sh push snapshotjob/runtime-e2e:dev snapshotjob/postgres:dev my-pipeline:dev \
  "${OPERATOR_IMAGE}" "${MEMBER_IMAGE}" "${KAFKA_BROKER_IMAGE}" "${S3PROXY_IMAGE}" >/dev/null
bash hack/kube/registry.sh push-chart charts/snapshotjob-operator >/dev/null
# Frozen until the cluster tier (see the top). Marked before: a preparation stopped during
# the pause still leaves its cluster to resume.
echo "${name}" >"${paused}"
bash hack/kube/cluster.sh pause
echo "==> Cluster tier prepared name=${name} seconds=$(( $(date +%s) - start ))"
