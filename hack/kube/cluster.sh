#!/usr/bin/env bash
# Create, inspect and delete the kind cluster used by cluster-mode tests.
#
# Why: Pods only run on a real node. kind gives them inside Docker containers on this
# machine; its node image is built here (hack/kube/node-image.sh) because no container
# registry is reachable. The node image carries its own default CNI (flannel, host-gw), which
# kind installs like kindnetd, so one control-plane node plus KIND_WORKERS worker nodes get
# one Pod network, and kube-network-policies (hack/kube/network-policies/), which enforces
# NetworkPolicy on it. Users who can reach a registry may point KIND_NODE_IMAGE at a stock
# kindest/node image of the same Kubernetes version instead; kind then installs kindnetd
# (see docs/development/kubernetes-testbed.md).
#
# Usage: hack/kube/cluster.sh up|down|status|check|nodes|kubeconfig|pause|resume|load IMAGE...
#   up     create the cluster (or reuse it if its node count matches), wait for every node
#          Ready and CoreDNS, then run `check`
#   check  Pod-to-Pod traffic between two nodes, Pod -> kubernetes Service, DNS, and that a
#          NetworkPolicy denying ingress stops Pod-to-Pod traffic (when kube-network-policies runs)
#   nodes  the cluster's node names (one a line; the control plane first)
#   status succeeds when the cluster exists and all its node containers run or are paused (a
#          cluster left stopped by a reboot fails it, and `up` deletes and creates it again)
#   pause  freeze every node container (docker pause): an idle three-node cluster costs about
#          a seventh of a 2-core machine (API server, etcd, kubelets, containerd), which
#          make test's background preparation would otherwise take from the tiers before it
#   resume thaw them and wait until every node is Ready again and untainted (`up` resumes too)
#   env: KIND_CLUSTER_NAME (default snapshotjob), KIND_WORKERS (default 2; 0 = one node),
#        KIND_NODE_IMAGE (default: locally built).
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND="${KUBE_BIN_DIR}/kind"

KIND_WORKERS="${KIND_WORKERS:-2}"
[[ "${KIND_WORKERS}" =~ ^[0-9]+$ ]] || die "KIND_WORKERS must be a number, got '${KIND_WORKERS}'"
KUBECONFIG_FILE="${KUBE_CACHE_ROOT}/kind-${KIND_CLUSTER_NAME}.kubeconfig"
CHECK_NAMESPACE="kube-system"
# cmd_check's server Pod runs in a scratch namespace of its own: its NetworkPolicy check denies
# all ingress there.
NETPOL_CHECK_NAMESPACE="snapshotjob-netcheck"

cluster_exists() {
  "${KIND}" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER_NAME}"
}

kctl() {
  "${KUBE_BIN_DIR}/kubectl" --kubeconfig "${KUBECONFIG_FILE}" "$@"
}

# node_containers: the cluster's node containers, running or not (kind's own listing).
node_containers() {
  "${KIND}" get nodes --name "${KIND_CLUSTER_NAME}" 2>/dev/null | sort
}

# node_states: each node container of the cluster with its Docker state, "NAME STATE" a line.
node_states() {
  local node
  while read -r node; do
    [[ -n "${node}" ]] || continue
    echo "${node} $(docker inspect --format '{{.State.Status}}' "${node}" 2>/dev/null || echo missing)"
  done < <(node_containers)
}

# stopped_nodes: the cluster's node containers neither running nor paused. A cluster outlives the
# Docker engine that ran it only as containers "exited" or "dead" (a reboot, a restart of
# dockerd): kind still lists it, but it cannot be loaded into or used, and a stopped kind
# node does not come back reliably. Such a cluster is deleted and created again.
stopped_nodes() {
  node_states | awk '$2 != "running" && $2 != "paused" { print $1 "=" $2 }'
}

# paused_nodes: the cluster's node containers that are paused.
paused_nodes() {
  node_states | awk '$2 == "paused" { print $1 }'
}

# wait_ready: every node Ready, the Pod network's DaemonSets and CoreDNS rolled out.
wait_ready() {
  local start
  start=$(date +%s)
  kctl wait --for=condition=Ready nodes --all --timeout=300s >&2
  # A stock kindest/node image (KIND_NODE_IMAGE) runs kindnetd instead: no flannel to wait for.
  if kctl -n kube-system get daemonset/kube-flannel-ds >/dev/null 2>&1; then
    kctl -n kube-system rollout status daemonset/kube-flannel-ds --timeout=180s >&2
  fi
  # NetworkPolicy enforcement beside flannel (hack/kube/network-policies/manifest.yaml).
  if kctl -n kube-system get daemonset/kube-network-policies >/dev/null 2>&1; then
    kctl -n kube-system rollout status daemonset/kube-network-policies --timeout=180s >&2
  fi
  kctl -n kube-system rollout status deployment/coredns --timeout=180s >&2
  log "Nodes ready name=${KIND_CLUSTER_NAME} nodes=$(kctl get nodes --no-headers | wc -l) seconds=$(( $(date +%s) - start ))"
}

cmd_up() {
  need_bins kind kubectl kubeadm kubelet kube-proxy coredns pause etcd crictl flanneld
  ensure_docker
  local start config want have i
  start=$(date +%s)
  want=$(( KIND_WORKERS + 1 ))
  local stopped
  if cluster_exists; then
    stopped="$(stopped_nodes | tr '\n' ' ')"
    if [[ -n "${stopped}" ]]; then
      log "Deleting a cluster whose nodes are not running name=${KIND_CLUSTER_NAME} nodes='${stopped% }'"
      "${KIND}" delete cluster --name "${KIND_CLUSTER_NAME}" >&2
    fi
  fi
  if cluster_exists; then
    have="$(node_containers | wc -l)"
    if [[ "${have}" != "${want}" ]]; then
      die "Cluster name=${KIND_CLUSTER_NAME} exists with nodes=${have} but nodes=${want} were asked for (KIND_WORKERS=${KIND_WORKERS}). Delete it first (KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME} hack/kube/cluster.sh down), or set KIND_WORKERS=$(( have - 1 )) to use it as it is"
    fi
    log "Cluster already exists name=${KIND_CLUSTER_NAME} nodes=${have}"
    "${KIND}" get kubeconfig --name "${KIND_CLUSTER_NAME}" >"${KUBECONFIG_FILE}"
    cmd_resume
    wait_ready
    return 0
  fi
  if [[ -z "${KIND_NODE_IMAGE:-}" ]]; then
    bash "${KUBE_HACK_DIR}/node-image.sh"
  fi
  config="$(mktemp)"
  # kind installs the node image's default CNI: flannel in the locally built image (see
  # hack/kube/flannel/), kindnetd in a stock one.
  cat >"${config}" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: "127.0.0.1"
  podSubnet: "10.244.0.0/16"
# Per-registry hosts.toml files: hack/kube/registry.sh connect puts the test bed registry's CA
# there (the node image's containerd config has no config_path of its own).
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
nodes:
  - role: control-plane
EOF
  for (( i = 0; i < KIND_WORKERS; i++ )); do
    echo "  - role: worker" >>"${config}"
  done
  local up_start
  up_start=$(date +%s)
  log "Creating cluster name=${KIND_CLUSTER_NAME} image=${NODE_IMAGE} workers=${KIND_WORKERS}"
  "${KIND}" create cluster --name "${KIND_CLUSTER_NAME}" --image "${NODE_IMAGE}" \
    --config "${config}" --wait 5m --kubeconfig "${KUBECONFIG_FILE}"
  rm -f "${config}"
  wait_ready
  log "Cluster up name=${KIND_CLUSTER_NAME} nodes=${want} create_seconds=$(( $(date +%s) - up_start )) total_seconds=$(( $(date +%s) - start )) kubeconfig=${KUBECONFIG_FILE}"
  cmd_check
}

# check_pod NAME NODE NAMESPACE : a testbox Pod pinned to NODE that serves HTTP on port 8080.
check_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $3
  labels: {app.kubernetes.io/name: snapshotjob-netcheck}
spec:
  nodeName: $2
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
    - name: box
      image: ${TESTBOX_IMAGE}
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
EOF
}

# deny_all_ingress NAMESPACE : a NetworkPolicy that selects every Pod of NAMESPACE and allows
# no ingress.
deny_all_ingress() {
  cat <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-all-ingress
  namespace: $1
spec:
  podSelector: {}
  policyTypes: [Ingress]
EOF
}

# cmd_check: Pod -> Pod across two nodes (ping and HTTP), Pod -> kubernetes Service, DNS, and
# NetworkPolicy enforcement: netcheck-a in kube-system, netcheck-b in NETPOL_CHECK_NAMESPACE.
cmd_check() {
  local start nodes a b ip_b failures=0 i denied netpol_start
  start=$(date +%s)
  [[ -f "${KUBECONFIG_FILE}" ]] || "${KIND}" get kubeconfig --name "${KIND_CLUSTER_NAME}" >"${KUBECONFIG_FILE}"
  mapfile -t nodes < <(kctl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  # Two workers when there are (the control plane sorts first), else whatever there is.
  if [[ ${#nodes[@]} -ge 3 ]]; then a="${nodes[1]}"; else a="${nodes[0]}"; fi
  b="${nodes[${#nodes[@]}-1]}"
  # The testbox image (busybox) is loaded on demand; kind load is a no-op when present.
  if ! docker exec "${a}" crictl inspecti "${TESTBOX_IMAGE}" >/dev/null 2>&1 \
      || ! docker exec "${b}" crictl inspecti "${TESTBOX_IMAGE}" >/dev/null 2>&1; then
    bash "${KUBE_HACK_DIR}/images.sh" testbox
    "${KIND}" load docker-image --name "${KIND_CLUSTER_NAME}" "${TESTBOX_IMAGE}" >&2
  fi
  kctl -n "${CHECK_NAMESPACE}" delete pod -l app.kubernetes.io/name=snapshotjob-netcheck \
    --ignore-not-found --wait=true >/dev/null
  kctl delete namespace "${NETPOL_CHECK_NAMESPACE}" --ignore-not-found --wait=true >/dev/null
  kctl create namespace "${NETPOL_CHECK_NAMESPACE}" >/dev/null
  # A Pod is admitted once its namespace's default ServiceAccount exists.
  for (( i = 0; i < 50; i++ )); do
    kctl -n "${NETPOL_CHECK_NAMESPACE}" get serviceaccount default >/dev/null 2>&1 && break
    sleep 0.2
  done
  { check_pod netcheck-a "${a}" "${CHECK_NAMESPACE}"; echo ---
    check_pod netcheck-b "${b}" "${NETPOL_CHECK_NAMESPACE}"; } | kctl apply -f - >/dev/null
  kctl -n "${CHECK_NAMESPACE}" wait --for=condition=Ready pod/netcheck-a --timeout=120s >/dev/null
  kctl -n "${NETPOL_CHECK_NAMESPACE}" wait --for=condition=Ready pod/netcheck-b --timeout=120s >/dev/null
  ip_b="$(kctl -n "${NETPOL_CHECK_NAMESPACE}" get pod netcheck-b -o jsonpath='{.status.podIP}')"
  ex() { kctl -n "${CHECK_NAMESPACE}" exec netcheck-a -- "$@"; }
  ex_b() { kctl -n "${NETPOL_CHECK_NAMESPACE}" exec netcheck-b -- "$@"; }
  # fetch_b TIMEOUT : netcheck-a gets netcheck-b's page over TCP. busybox's static wget crashes
  # in glibc's resolver; nc speaks the HTTP just as well.
  fetch_b() {
    ex sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w $1 ${ip_b} 8080" 2>/dev/null | grep -qx netcheck-b
  }
  if ex ping -c 2 -W 2 "${ip_b}" >/dev/null 2>&1; then
    log "Check ok=ping from_node=${a} to_node=${b} to_ip=${ip_b}"
  else
    log "Check failed=ping from_node=${a} to_node=${b} to_ip=${ip_b}"; failures=$((failures + 1))
  fi
  if fetch_b 5; then
    log "Check ok=pod-tcp from_node=${a} to_node=${b} to=${ip_b}:8080"
  else
    log "Check failed=pod-tcp from_node=${a} to_node=${b} to=${ip_b}:8080"; failures=$((failures + 1))
  fi
  # Plain HTTP to the HTTPS port: the API server's "400 Bad Request" proves the Service path
  # (DNS search list, kube-proxy, the Pod network to the control plane) without TLS tools.
  if ex_b sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 kubernetes.default 443" 2>/dev/null \
      | grep -qE 'HTTP/1\.[01] [0-9]+'; then
    log "Check ok=service from_node=${b} to=kubernetes.default:443"
  else
    log "Check failed=service from_node=${b} to=kubernetes.default:443"; failures=$((failures + 1))
  fi
  if ex_b nslookup kubernetes.default.svc.cluster.local >/dev/null 2>&1; then
    log "Check ok=dns from_node=${b} name=kubernetes.default.svc.cluster.local"
  else
    log "Check failed=dns from_node=${b} name=kubernetes.default.svc.cluster.local"; failures=$((failures + 1))
  fi
  # NetworkPolicy: denying all ingress in netcheck-b's namespace stops the connection that
  # worked above. kube-network-policies programs a policy within about a second; a denied
  # SYN is dropped, so each try waits 2 s for a reply. A stock node image (KIND_NODE_IMAGE)
  # runs kindnetd instead: not checked there.
  if kctl -n kube-system get daemonset/kube-network-policies >/dev/null 2>&1; then
    netpol_start=$(date +%s)
    deny_all_ingress "${NETPOL_CHECK_NAMESPACE}" | kctl apply -f - >/dev/null
    denied=false
    for (( i = 0; i < 8; i++ )); do
      if ! fetch_b 2; then denied=true; break; fi
      sleep 1
    done
    if [[ "${denied}" == true ]]; then
      log "Check ok=netpol-deny from_node=${a} to_node=${b} to=${ip_b}:8080 seconds=$(( $(date +%s) - netpol_start ))"
    else
      log "Check failed=netpol-deny from_node=${a} to_node=${b} to=${ip_b}:8080 (still reachable under a deny-all-ingress NetworkPolicy)"
      failures=$((failures + 1))
    fi
  else
    log "Check skipped=netpol-deny reason='no kube-network-policies DaemonSet'"
  fi
  kctl -n "${CHECK_NAMESPACE}" delete pod netcheck-a --wait=false >/dev/null
  kctl delete namespace "${NETPOL_CHECK_NAMESPACE}" --wait=false >/dev/null
  [[ ${failures} == 0 ]] || die "Network check failed name=${KIND_CLUSTER_NAME} failures=${failures}"
  log "Network check passed name=${KIND_CLUSTER_NAME} nodes=${#nodes[@]} seconds=$(( $(date +%s) - start ))"
}

cmd_nodes() {
  node_containers
}

cmd_down() {
  [[ -x "${KIND}" ]] || { log "kind not built, nothing to delete"; return 0; }
  docker info >/dev/null 2>&1 || { log "Docker engine not running, nothing to delete"; return 0; }
  paused_nodes | xargs -r docker unpause >/dev/null 2>&1 || true
  "${KIND}" delete cluster --name "${KIND_CLUSTER_NAME}"
  rm -f "${KUBECONFIG_FILE}"
}

# cmd_status: succeeds when the cluster exists and every node container runs or is paused.
cmd_status() {
  [[ -x "${KIND}" ]] && docker info >/dev/null 2>&1 && cluster_exists && [[ -z "$(stopped_nodes)" ]]
}

cmd_pause() {
  cluster_exists || die "No cluster name=${KIND_CLUSTER_NAME} to pause"
  local nodes
  mapfile -t nodes < <(node_containers)
  docker pause "${nodes[@]}" >/dev/null
  log "Cluster paused name=${KIND_CLUSTER_NAME} nodes=${#nodes[@]}"
}

# cmd_resume: thaw paused nodes, then wait until the cluster has noticed. Frozen together, the
# control plane's node-lifecycle controller may first see every kubelet's lease as older
# than its 40 s grace and mark the nodes unreachable, until the kubelets renew (every 10 s):
# so wait past one renewal, then for every node Ready and no not-ready/unreachable taint.
cmd_resume() {
  local nodes start taints i
  mapfile -t nodes < <(paused_nodes)
  [[ ${#nodes[@]} -gt 0 ]] || return 0
  start=$(date +%s)
  docker unpause "${nodes[@]}" >/dev/null
  [[ -f "${KUBECONFIG_FILE}" ]] || "${KIND}" get kubeconfig --name "${KIND_CLUSTER_NAME}" >"${KUBECONFIG_FILE}"
  sleep 15
  kctl wait --for=condition=Ready nodes --all --timeout=300s >&2
  for (( i = 0; i < 150; i++ )); do
    taints="$(kctl get nodes -o jsonpath='{range .items[*]}{.spec.taints[*].key}{" "}{end}')"
    [[ "${taints}" == *node.kubernetes.io/unreachable* || "${taints}" == *node.kubernetes.io/not-ready* ]] || break
    sleep 2
  done
  [[ ${i} -lt 150 ]] || die "Nodes still tainted 300 s after resuming name=${KIND_CLUSTER_NAME}: ${taints}"
  log "Cluster resumed name=${KIND_CLUSTER_NAME} nodes=${#nodes[@]} seconds=$(( $(date +%s) - start ))"
}

cmd_kubeconfig() {
  "${KIND}" get kubeconfig --name "${KIND_CLUSTER_NAME}"
}

# cmd_load IMAGE...: into every node. Not only the workers: the kind values
# (examples/kubernetes/values-kind.yaml) put the operator and the Hazelcast members on the
# control plane, tolerating its taint, so the project image is needed there too.
cmd_load() {
  [[ $# -gt 0 ]] || die "usage: cluster.sh load IMAGE..."
  "${KIND}" load docker-image --name "${KIND_CLUSTER_NAME}" "$@"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  check) cmd_check ;;
  nodes) cmd_nodes ;;
  kubeconfig) cmd_kubeconfig ;;
  pause) cmd_pause ;;
  resume) cmd_resume ;;
  load) shift; cmd_load "$@" ;;
  *) die "usage: $0 up|down|status|check|nodes|kubeconfig|pause|resume|load IMAGE..." ;;
esac
