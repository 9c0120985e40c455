#!/usr/bin/env bash
# Build a kind node image from local parts only: debootstrap rootfs + kind's base files +
# Kubernetes binaries built here + component images built here.
#
# Why: the stock kindest/node image lives in a container registry this machine cannot reach.
# The steps mirror kind's own two builders so that `kind create cluster --image` treats the
# result like a stock node:
#   1. base image (kind's images/base/Dockerfile): a Debian bookworm rootfs with systemd,
#      iptables, containerd, runc and CNI plugins (here: Debian packages via debootstrap and
#      `docker import`), plus kind's entrypoint, systemd units and containerd config, which
#      ship in the sigs.k8s.io/kind Go module and are copied from the module cache.
#   2. node image (kind's pkg/build/nodeimage): run the base image, `docker cp` kubeadm,
#      kubelet and kubectl to /usr/bin, write /kind/version, start containerd and import the
#      control-plane images into its k8s.io namespace, stop it, `docker commit`.
#   3. kind's default-CNI hook: /kind/manifests/default-cni.yaml, which `kind create cluster`
#      applies unless disableDefaultCNI is set. Here it is flannel (hack/kube/flannel/) followed
#      by kube-network-policies (hack/kube/network-policies/), which enforces NetworkPolicy.
# Deviations, because their sources are not on the module proxy: Debian's containerd 1.6 /
# runc 1.1 instead of source builds, flanneld (host-gw) instead of kindnetd, no
# local-path-provisioner (kind falls back to its host-path StorageClass).
#
# Usage: hack/kube/node-image.sh
#   Images are rebuilt only when their inputs changed (binaries, scripts, base layers);
#   FORCE=1 rebuilds all of them except the debootstrap rootfs.
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CNI_MANIFEST="${KUBE_HACK_DIR}/flannel/manifest.yaml"
NETPOL_MANIFEST="${KUBE_HACK_DIR}/network-policies/manifest.yaml"

# default_cni_manifest: the node image's /kind/manifests/default-cni.yaml, flannel's manifest
# (its first lines carry kind's template and patch markers) and then kube-network-policies',
# with the image versions filled in.
default_cni_manifest() {
  { cat "${CNI_MANIFEST}"; echo "---"; cat "${NETPOL_MANIFEST}"; } \
    | sed -e "s/FLANNEL_VERSION/${FLANNEL_VERSION}/g" \
          -e "s/KUBE_NETWORK_POLICIES_VERSION/${KUBE_NETWORK_POLICIES_VERSION}/g"
}

build_base_image() {
  bash "${KUBE_HACK_DIR}/images.sh" node-rootfs
  local files ctx inputs
  inputs="$( { files_hash "${BASH_SOURCE[0]}"; echo "${KIND_VERSION}";
      docker image inspect --format '{{.Id}}' "${NODE_ROOTFS_IMAGE}"; } | sha256sum | cut -d' ' -f1)"
  if image_fresh "${NODE_BASE_IMAGE}" "${inputs}"; then
    log "Image up to date image=${NODE_BASE_IMAGE}"
    return 0
  fi
  files="$(kind_module_dir)/images/base/files"
  [[ -d "${files}" ]] || die "kind base files not found at ${files}"
  ctx="$(mktemp -d)"
  cp -a "${files}" "${ctx}/files"
  # The fuse-overlayfs snapshotter is only for rootless kind, and its binary is not built.
  sed -i '/^\[proxy_plugins\]/,/^$/d' "${ctx}/files/etc/containerd/config.toml"
  # Never ask for a lower OOM score than containerd has: lowering needs CAP_SYS_RESOURCE,
  # which nested or sandboxed nodes may lack (the same reason kind sets it for rootless).
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
    "${ctx}/files/etc/containerd/config.toml"
  cat >"${ctx}/Dockerfile" <<EOF
FROM ${NODE_ROOTFS_IMAGE}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/LICENSES/ /LICENSES/
COPY files/etc/ /etc/
RUN chmod 0755 /usr/local/bin/* /kind/bin /kind/bin/* \\
 && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
          /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
          /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
 && ln -sf "\$(command -v systemd || echo /lib/systemd/systemd)" /sbin/init \\
 && ln -sf /usr/bin/containerd /usr/local/bin/containerd \\
 && ln -sf /usr/bin/containerd-shim-runc-v2 /usr/local/bin/containerd-shim-runc-v2 \\
 && ln -sf /usr/bin/ctr /usr/local/bin/ctr \\
 && mkdir -p /opt/cni/bin && for p in /usr/lib/cni/*; do ln -sf "\$p" /opt/cni/bin/; done \\
 && rm -f /etc/systemd/system/containerd-fuse-overlayfs.service
RUN systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests
RUN ctr oci spec \\
  | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
 && containerd --version && runc --version
ENV container=docker
LABEL snapshotjob.inputs=${inputs}
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  log "Building image=${NODE_BASE_IMAGE}"
  docker_build "${NODE_BASE_IMAGE}" "${ctx}"
  rm -rf "${ctx}"
}

build_node_image() {
  need_bins kubeadm kubelet kubectl crictl
  bash "${KUBE_HACK_DIR}/images.sh" components
  local inputs component_ids
  # Rebuild when a binary, a component image, the base image or these scripts changed.
  component_ids="$(bash "${KUBE_HACK_DIR}/images.sh" list-components \
    | xargs docker image inspect --format '{{.Id}}')"
  inputs="$( { files_hash "${KUBE_BIN_DIR}"/{kubeadm,kubelet,kubectl,crictl} \
      "${BASH_SOURCE[0]}" "${KUBE_HACK_DIR}/lib.sh" "${CNI_MANIFEST}" "${NETPOL_MANIFEST}";
      echo "${component_ids}";
      docker image inspect --format '{{.Id}}' "${NODE_BASE_IMAGE}"; } | sha256sum | cut -d' ' -f1)"
  if image_fresh "${NODE_IMAGE}" "${inputs}"; then
    log "Image up to date image=${NODE_IMAGE}"
    return 0
  fi
  local images bin cid
  mapfile -t images < <(bash "${KUBE_HACK_DIR}/images.sh" list-components)
  cid="snapshotjob-node-build-$$"
  BUILD_CONTAINER="${cid}"
  docker rm -f "${cid}" >/dev/null 2>&1 || true
  trap 'docker rm -f -v "${BUILD_CONTAINER}" >/dev/null 2>&1 || true' EXIT
  docker run -d --name "${cid}" --entrypoint=sleep --security-opt seccomp=unconfined \
    "${NODE_BASE_IMAGE}" infinity >/dev/null
  for bin in kubeadm kubelet kubectl; do
    docker cp "${KUBE_BIN_DIR}/${bin}" "${cid}:/usr/bin/${bin}"
    docker exec "${cid}" chmod 0755 "/usr/bin/${bin}"
    docker exec "${cid}" chown root:root "/usr/bin/${bin}"
  done
  # kind's base image carries crictl in /usr/local/bin (its config is in kind's base files).
  docker cp "${KUBE_BIN_DIR}/crictl" "${cid}:/usr/local/bin/crictl"
  docker exec "${cid}" chmod 0755 /usr/local/bin/crictl
  docker exec "${cid}" bash -c "echo -n '${KUBE_VERSION}' > /kind/version"
  # kind's default-CNI hook (kind templates {{ .PodSubnet }} in it at create time).
  docker exec "${cid}" mkdir -p /kind/manifests
  default_cni_manifest | docker exec -i "${cid}" bash -c 'cat > /kind/manifests/default-cni.yaml'
  docker exec "${cid}" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  docker exec "${cid}" bash -c \
    'for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done; ctr version >/dev/null'
  log "Importing images into node containerd images='${images[*]}'"
  docker save "${images[@]}" | docker exec -i "${cid}" \
    ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests -
  docker exec "${cid}" ctr --namespace=k8s.io images list -q >&2
  docker exec "${cid}" pkill containerd || true
  sleep 1
  docker commit \
    --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
    --change "LABEL snapshotjob.inputs=${inputs}" \
    "${cid}" "${NODE_IMAGE}" >/dev/null
  log "Built image=${NODE_IMAGE}"
}

main() {
  ensure_docker
  local start
  start=$(date +%s)
  build_base_image
  build_node_image
  log "Node image ready image=${NODE_IMAGE} seconds=$(( $(date +%s) - start ))"
}

main "$@"
