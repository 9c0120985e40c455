# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared helpers for hack/kube/*.sh (sourced, not executed).
#
# Why a library: the image, node-image and cluster scripts all need the same answers to
# "where are the binaries", "is the Docker engine up (start it if not)", "which Debian mirror
# does this machine use" and "is this image already built", and those answers must agree.

KUBE_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/kube/versions.env
source "${KUBE_HACK_DIR}/versions.env"

export PATH="${PATH}:/usr/local/go/bin:${HOME}/go/bin"
KUBE_CACHE_ROOT="${XDG_CACHE_HOME:-${HOME}/.cache}/snapshotjob/kube/${KUBE_VERSION}"
KUBE_BIN_DIR="${KUBE_BIN_DIR:-${KUBE_CACHE_ROOT}/bin}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"

# Image names. Component images carry the names kubeadm expects so that no pull happens.
BASE_IMAGE="${BASE_IMAGE:-snapshotjob/debian-base:${DEBIAN_SUITE}}"
NODE_ROOTFS_IMAGE="snapshotjob/kind-rootfs:${DEBIAN_SUITE}"
KUBE_PROXY_BASE_IMAGE="snapshotjob/kube-proxy-base:${DEBIAN_SUITE}"
NODE_BASE_IMAGE="snapshotjob/kind-base:${KIND_VERSION}-${DEBIAN_SUITE}"
NODE_IMAGE="${KIND_NODE_IMAGE:-snapshotjob/kind-node:${KUBE_VERSION}}"
TESTBOX_IMAGE="snapshotjob/testbox:dev"
FLANNEL_IMAGE="snapshotjob/flannel:${FLANNEL_VERSION}"
KIND_CLUSTER_NAME="${KIND_CLUSTER_NAME:-snapshotjob}"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# need_bins NAME... : fail with a pointer to the build when a binary is missing.
need_bins() {
  local name missing=()
  for name in "$@"; do
    [[ -x "${KUBE_BIN_DIR}/${name}" ]] || missing+=("${name}")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "Building missing binaries=${missing[*]}"
    bash "${KUBE_HACK_DIR}/build.sh" || die "hack/kube/build.sh failed"
  fi
}

# bounding_set_incomplete: true when this sandbox withholds a capability (e.g. CI machines
# without CAP_SYS_RESOURCE); privileged containers then need hack/kube's runc-capfilter.
bounding_set_incomplete() {
  local bnd
  bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  # 41 capabilities (0..40) exist on the kernels we support: all set is 0x1ffffffffff.
  [[ $(( 16#${bnd} & 16#1ffffffffff )) -ne $(( 16#1ffffffffff )) ]]
}

# ensure_docker: make sure the Docker engine answers; start dockerd when we are root and
# it is installed but not running (no systemd on CI machines). Where the capability
# bounding set is incomplete, dockerd gets runc-capfilter as its default runtime, without
# which `--privileged` containers (kind nodes) cannot start.
ensure_docker() {
  local runtime_args=()
  if bounding_set_incomplete; then
    need_bins runc-capfilter
    runtime_args=(--add-runtime "capfilter=${KUBE_BIN_DIR}/runc-capfilter"
                  --default-runtime capfilter)
  fi
  if docker info >/dev/null 2>&1; then
    if [[ ${#runtime_args[@]} -gt 0 ]] \
        && [[ "$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null)" != capfilter ]]; then
      log "WARNING: capability bounding set is incomplete but dockerd does not use" \
        "runc-capfilter; privileged containers will fail. Restart dockerd with:" \
        "dockerd ${runtime_args[*]}"
    fi
    return 0
  fi
  command -v dockerd >/dev/null || die "dockerd not installed: run 'make install' (Debian package docker.io)"
  [[ "$(id -u)" == 0 ]] || die "Docker engine is not running and starting it needs root"
  local log_file="${KUBE_CACHE_ROOT%/*}/dockerd.log"
  mkdir -p "${KUBE_CACHE_ROOT%/*}"
  log "Starting dockerd log=${log_file} args='${runtime_args[*]}'"
  # setsid: dockerd must outlive this script and not share its process group. For the same
  # reason it takes no temporary folder from its caller (a test session's goes when the
  # session ends, testbed/scratch.py); dockerd and containerd keep their own under /var/lib.
  setsid nohup env -u TMPDIR -u SPARK_LOCAL_DIRS dockerd "${runtime_args[@]}" \
    >"${log_file}" 2>&1 < /dev/null &
  local _
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "Docker engine did not come up; see ${log_file}"
}

# docker_build TAG CONTEXT_DIR [DOCKER_BUILD_ARGS...] : quiet `docker build`; the full output
# is shown on failure.
docker_build() {
  local out tag="$1" context="$2" previous
  shift 2
  previous="$(docker image inspect --format '{{.Id}}' "${tag}" 2>/dev/null || true)"
  out="$(mktemp)"
  if ! docker build -t "${tag}" "$@" "${context}" >"${out}" 2>&1; then
    cat "${out}" >&2
    rm -f "${out}"
    die "docker build failed image=${tag}"
  fi
  rm -f "${out}"
  # The image this tag named before is superseded: removed with the layers no other image
  # shares, or a machine that builds every commit (CI) fills its disk with them. One that
  # still has another tag or a container keeps it, and `docker image rm` refuses.
  if [[ -n "${previous}" && "${previous}" != "$(docker image inspect --format '{{.Id}}' "${tag}")" ]]; then
    docker image rm "${previous}" >/dev/null 2>&1 || true
  fi
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# image_inputs IMAGE : the snapshotjob.inputs label (hash of what the image was built from).
image_inputs() {
  docker image inspect --format '{{index .Config.Labels "snapshotjob.inputs"}}' "$1" 2>/dev/null
}

# image_fresh IMAGE HASH : true when IMAGE exists, was built from HASH and FORCE is not 1.
image_fresh() {
  [[ "${FORCE:-0}" != 1 ]] && [[ "$(image_inputs "$1")" == "$2" ]]
}

# files_hash FILE... : one sha256 over the given files' contents.
files_hash() {
  cat "$@" | sha256sum | cut -d' ' -f1
}

# debian_mirror: the Debian archive this machine's apt already uses (no host is hard-coded).
debian_mirror() {
  local uri
  uri="$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '{print $2}' | grep -v security | head -1)"
  if [[ -z "${uri}" ]]; then
    uri="$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security \
      | awk '{print $2}' | head -1)"
  fi
  [[ -n "${uri}" ]] || die "Cannot find a Debian mirror in /etc/apt/sources*"
  echo "${uri}"
}

# debootstrap_image TAG INCLUDE_CSV : a ${DEBIAN_SUITE} minbase rootfs imported into Docker.
debootstrap_image() {
  local tag="$1" include="$2" root start
  if image_exists "${tag}"; then
    log "Image up to date image=${tag}"
    return 0
  fi
  command -v debootstrap >/dev/null || die "debootstrap not installed: run 'make install'"
  root="$(mktemp -d /var/tmp/snapshotjob-rootfs.XXXXXX)"
  start=$(date +%s)
  log "Debootstrapping image=${tag} suite=${DEBIAN_SUITE} include=${include}"
  nice -n 10 debootstrap --variant=minbase --include="${include}" \
    "${DEBIAN_SUITE}" "${root}" "$(debian_mirror)" >"${root}.log" 2>&1 \
    || { tail -20 "${root}.log" >&2; rm -rf "${root}"; die "debootstrap failed for ${tag}"; }
  rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin \
    "${root}"/var/cache/apt/archives/*.deb "${root}"/var/log/*.log
  tar --numeric-owner -C "${root}" -c . \
    | docker import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' - "${tag}" >/dev/null
  rm -rf "${root}" "${root}.log"
  log "Imported image=${tag} seconds=$(( $(date +%s) - start ))"
}

# kind_module_dir: where the Go module cache holds kind's source (base image files).
kind_module_dir() {
  (cd "${KUBE_HACK_DIR}/modules/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
}
