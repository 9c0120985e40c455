#!/usr/bin/env bash
# Create, inspect and delete the kind cluster used by cluster-mode tests.
#
# Why: Pods only run on a real node. kind gives one inside a Docker container on this
# machine; its node image is built here (hack/kube/node-image.sh) because no container
# registry is reachable. Users who can reach a registry may point KIND_NODE_IMAGE at a stock
# kindest/node image of the same Kubernetes version instead; kind then installs its default
# CNI (kindnetd) as usual (see docs/kubernetes-testbed.md).
#
# Usage: hack/kube/cluster.sh up|down|status|kubeconfig|load IMAGE...
#   env: KIND_CLUSTER_NAME (default snapshotjob), KIND_NODE_IMAGE (default: locally built).
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND="${KUBE_BIN_DIR}/kind"

cluster_exists() {
  "${KIND}" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER_NAME}"
}

cmd_up() {
  need_bins kind kubectl kubeadm kubelet kube-proxy coredns pause etcd crictl
  ensure_docker
  local start config
  start=$(date +%s)
  if cluster_exists; then
    log "Cluster already exists name=${KIND_CLUSTER_NAME}"
    return 0
  fi
  local stock=0
  if [[ -z "${KIND_NODE_IMAGE:-}" ]]; then
    bash "${KUBE_HACK_DIR}/node-image.sh"
  else
    stock=1
  fi
  config="$(mktemp)"
  # A locally built node has no kindnetd image: it carries a static bridge CNI config
  # instead, so kind must not install its default CNI. Stock images keep kindnetd.
  cat >"${config}" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: "127.0.0.1"
  podSubnet: "10.244.0.0/16"
  disableDefaultCNI: $([[ ${stock} == 1 ]] && echo false || echo true)
nodes:
  - role: control-plane
EOF
  local up_start
  up_start=$(date +%s)
  log "Creating cluster name=${KIND_CLUSTER_NAME} image=${NODE_IMAGE}"
  "${KIND}" create cluster --name "${KIND_CLUSTER_NAME}" --image "${NODE_IMAGE}" \
    --config "${config}" --wait 5m --kubeconfig "${KUBE_CACHE_ROOT}/kind-${KIND_CLUSTER_NAME}.kubeconfig"
  rm -f "${config}"
  "${KUBE_BIN_DIR}/kubectl" --kubeconfig "${KUBE_CACHE_ROOT}/kind-${KIND_CLUSTER_NAME}.kubeconfig" \
    -n kube-system rollout status deployment/coredns --timeout=180s >&2
  log "Cluster up name=${KIND_CLUSTER_NAME} create_seconds=$(( $(date +%s) - up_start )) total_seconds=$(( $(date +%s) - start )) kubeconfig=${KUBE_CACHE_ROOT}/kind-${KIND_CLUSTER_NAME}.kubeconfig"
}

cmd_down() {
  [[ -x "${KIND}" ]] || { log "kind not built, nothing to delete"; return 0; }
  docker info >/dev/null 2>&1 || { log "Docker engine not running, nothing to delete"; return 0; }
  "${KIND}" delete cluster --name "${KIND_CLUSTER_NAME}"
  rm -f "${KUBE_CACHE_ROOT}/kind-${KIND_CLUSTER_NAME}.kubeconfig"
}

cmd_status() {
  [[ -x "${KIND}" ]] && docker info >/dev/null 2>&1 && cluster_exists
}

cmd_kubeconfig() {
  "${KIND}" get kubeconfig --name "${KIND_CLUSTER_NAME}"
}

cmd_load() {
  [[ $# -gt 0 ]] || die "usage: cluster.sh load IMAGE..."
  "${KIND}" load docker-image --name "${KIND_CLUSTER_NAME}" "$@"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubeconfig) cmd_kubeconfig ;;
  load) shift; cmd_load "$@" ;;
  *) die "usage: $0 up|down|status|kubeconfig|load IMAGE..." ;;
esac
