#!/usr/bin/env bash
# Build the container images the testbeds need, locally, without any container registry.
#
# Why: this machine reaches package registries only, so even the pause and CoreDNS images
# cannot be pulled. Every image here is made from a debootstrap rootfs (`docker import`) or
# `FROM scratch` plus binaries built by hack/kube/build.sh, and tagged with the exact name
# kubeadm asks for, so the cluster never tries to pull.
#
# Usage: hack/kube/images.sh [base|components|testbox|all]...   (default: base testbox)
#   base        snapshotjob/debian-base:bookworm  - minbase rootfs for the project's images
#   components  registry.k8s.io/{kube-*,etcd,coredns/coredns,pause}, snapshotjob/flannel
#               (the Pod network) and snapshotjob/kube-network-policies (its NetworkPolicy
#               enforcement) for the kind node
#   flannel     snapshotjob/flannel:<FLANNEL_VERSION> only
#   kube-network-policies  snapshotjob/kube-network-policies:<KUBE_NETWORK_POLICIES_VERSION> only
#   testbox     snapshotjob/testbox:dev           - busybox image used by the cluster tests
# Images are rebuilt only when their inputs (binary, this script) changed; FORCE=1 forces it.
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBE_NETWORK_POLICIES_IMAGE="snapshotjob/kube-network-policies:${KUBE_NETWORK_POLICIES_VERSION}"

# scratch_image TAG BINARY_PATH IN_IMAGE_PATH [USER]
scratch_image() {
  local tag="$1" src="$2" dest="$3" user="${4:-0:0}" ctx inputs
  inputs="$(files_hash "${src}" "${BASH_SOURCE[0]}")"
  if image_fresh "${tag}" "${inputs}"; then
    log "Image up to date image=${tag}"
    return 0
  fi
  ctx="$(mktemp -d)"
  mkdir -p "${ctx}/root/etc" "${ctx}/root/tmp" "${ctx}/root/$(dirname "${dest}")"
  chmod 1777 "${ctx}/root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' \
    >"${ctx}/root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"${ctx}/root/etc/group"
  cp "${src}" "${ctx}/root/${dest}"
  cat >"${ctx}/Dockerfile" <<EOF
FROM scratch
COPY root/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
LABEL snapshotjob.inputs=${inputs}
USER ${user}
ENTRYPOINT ["${dest}"]
EOF
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
  log "Built image=${tag}"
}

build_base() {
  debootstrap_image "${BASE_IMAGE}" "ca-certificates,tzdata"
}

# kube-proxy programs iptables/nftables and needs conntrack, so it gets a small Debian
# userland with exactly those tools (the upstream image is distroless-iptables).
build_kube_proxy() {
  local tag="$1" ctx inputs
  inputs="$(files_hash "${KUBE_BIN_DIR}/kube-proxy" "${BASH_SOURCE[0]}")"
  if image_fresh "${tag}" "${inputs}"; then
    log "Image up to date image=${tag}"
    return 0
  fi
  debootstrap_image "${KUBE_PROXY_BASE_IMAGE}" "iptables,nftables,conntrack,kmod"
  ctx="$(mktemp -d)"
  cp "${KUBE_BIN_DIR}/kube-proxy" "${ctx}/kube-proxy"
  cat >"${ctx}/Dockerfile" <<EOF
FROM ${KUBE_PROXY_BASE_IMAGE}
COPY kube-proxy /usr/local/bin/kube-proxy
LABEL snapshotjob.inputs=${inputs}
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
EOF
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
  log "Built image=${tag}"
}

# flanneld, the Pod network across kind nodes, execs iptables (its masquerade and forward
# rules) and runs two small scripts, so it shares kube-proxy's Debian userland. The image is
# imported into the node image; hack/kube/flannel/manifest.yaml runs it as a DaemonSet.
build_flannel() {
  local ctx inputs start
  need_bins flanneld
  inputs="$(files_hash "${KUBE_BIN_DIR}/flanneld" "${BASH_SOURCE[0]}" \
    "${KUBE_HACK_DIR}"/flannel/*.sh)"
  if image_fresh "${FLANNEL_IMAGE}" "${inputs}"; then
    log "Image up to date image=${FLANNEL_IMAGE}"
    return 0
  fi
  start=$(date +%s)
  debootstrap_image "${KUBE_PROXY_BASE_IMAGE}" "iptables,nftables,conntrack,kmod"
  ctx="$(mktemp -d)"
  cp "${KUBE_BIN_DIR}/flanneld" "${ctx}/flanneld"
  cp "${KUBE_HACK_DIR}/flannel/flanneld.sh" "${ctx}/flanneld.sh"
  cp "${KUBE_HACK_DIR}/flannel/cni-conf.sh" "${ctx}/flannel-cni-conf.sh"
  chmod 0755 "${ctx}"/flanneld* "${ctx}/flannel-cni-conf.sh"
  cat >"${ctx}/Dockerfile" <<EOF
FROM ${KUBE_PROXY_BASE_IMAGE}
COPY flanneld flanneld.sh flannel-cni-conf.sh /usr/local/bin/
LABEL snapshotjob.inputs=${inputs}
ENTRYPOINT ["/usr/local/bin/flanneld.sh"]
EOF
  docker_build "${FLANNEL_IMAGE}" "${ctx}"
  rm -rf "${ctx}"
  log "Built image=${FLANNEL_IMAGE} seconds=$(( $(date +%s) - start ))"
}

# kube-network-policies enforces NetworkPolicy in the kind clusters (flannel does not). It
# speaks netlink itself (nftables, nfqueue), no userland, so FROM scratch like upstream's
# distroless image. Imported into the node image; hack/kube/network-policies/manifest.yaml
# runs it as a DaemonSet.
build_kube_network_policies() {
  need_bins kube-network-policies
  scratch_image "${KUBE_NETWORK_POLICIES_IMAGE}" "${KUBE_BIN_DIR}/kube-network-policies" \
    /usr/local/bin/kube-network-policies
}

# component_images: the image list kubeadm will use for this Kubernetes version.
component_images() {
  "${KUBE_BIN_DIR}/kubeadm" config images list --kubernetes-version "${KUBE_VERSION}" 2>/dev/null
}

build_components() {
  need_bins kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubeadm etcd \
    coredns pause flanneld
  local image name
  for image in $(component_images) registry.k8s.io/pause:3.10; do
    name="${image##*/}"; name="${name%%:*}"
    case "${name}" in
      kube-apiserver|kube-controller-manager|kube-scheduler)
        scratch_image "${image}" "${KUBE_BIN_DIR}/${name}" "/usr/local/bin/${name}" ;;
      kube-proxy) build_kube_proxy "${image}" ;;
      etcd) scratch_image "${image}" "${KUBE_BIN_DIR}/etcd" /usr/local/bin/etcd ;;
      coredns) scratch_image "${image}" "${KUBE_BIN_DIR}/coredns" /coredns ;;
      pause) scratch_image "${image}" "${KUBE_BIN_DIR}/pause" /pause 65535:65535 ;;
      *) die "No local recipe for image=${image}" ;;
    esac
  done
  build_flannel
  build_kube_network_policies
}

# The images the kind node must hold (printed one per line, for node-image.sh).
list_components() {
  component_images
  echo registry.k8s.io/pause:3.10
  echo "${FLANNEL_IMAGE}"
  echo "${KUBE_NETWORK_POLICIES_IMAGE}"
}

build_testbox() {
  local ctx busybox
  if image_exists "${TESTBOX_IMAGE}" && [[ "${FORCE:-0}" != 1 ]]; then
    log "Image up to date image=${TESTBOX_IMAGE}"
    return 0
  fi
  busybox="$(command -v busybox || true)"
  if [[ -z "${busybox}" || "$(ldd "${busybox}" 2>&1 || true)" != *"not a dynamic"* ]]; then
    die "A static busybox is needed: run 'make install' (Debian package busybox-static)"
  fi
  ctx="$(mktemp -d)"
  mkdir -p "${ctx}/root/bin" "${ctx}/root/etc" "${ctx}/root/tmp"
  chmod 1777 "${ctx}/root/tmp"
  cp "${busybox}" "${ctx}/root/bin/busybox"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"${ctx}/root/etc/passwd"
  printf 'root:x:0:\n' >"${ctx}/root/etc/group"
  cat >"${ctx}/Dockerfile" <<'EOF'
FROM scratch
COPY root/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/bin
CMD ["sh"]
EOF
  docker_build "${TESTBOX_IMAGE}" "${ctx}"
  rm -rf "${ctx}"
  log "Built image=${TESTBOX_IMAGE}"
}

# Packages of the kind node rootfs: kind's base image list (systemd, iptables, ...) with
# Debian's containerd, runc and CNI plugins instead of kind's source-built ones.
node_rootfs_packages() {
  local pkgs=(
    systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2
    pigz bash ca-certificates curl jq procps
    containerd runc containernetworking-plugins
  )
  local IFS=,
  echo "${pkgs[*]}"
}

main() {
  local targets=("$@")
  [[ ${#targets[@]} -gt 0 ]] || targets=(base testbox)
  ensure_docker
  local t
  for t in "${targets[@]}"; do
    case "${t}" in
      base) build_base ;;
      components) build_components ;;
      flannel) build_flannel ;;
      kube-network-policies) build_kube_network_policies ;;
      testbox) build_testbox ;;
      node-rootfs) debootstrap_image "${NODE_ROOTFS_IMAGE}" "$(node_rootfs_packages)" ;;
      list-components) list_components ;;
      all) build_base; build_components; build_testbox ;;
      *) die "Unknown target=${t}" ;;
    esac
  done
}

main "$@"
