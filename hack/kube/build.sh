#!/usr/bin/env bash
# Build every Kubernetes testbed binary from source through the Go module proxy.
#
# Why: this project's machines reach package registries only (no container registry, no
# release downloads), so kube-apiserver & co. are compiled from their Go modules. The
# result is cached outside the repository in
#   ${XDG_CACHE_HOME:-~/.cache}/snapshotjob/kube/<KUBE_VERSION>/bin
# and the script is idempotent: a binary whose stamp (module files + ldflags) is unchanged
# is skipped, so a warm run costs a second. Builds run under `nice -n 19` with `-p=2` (or
# KUBE_BUILD_PARALLEL) so a 2-core machine stays usable while they run.
#
# Usage: hack/kube/build.sh [GROUP...]
#        GROUP in: kubernetes etcd coredns pause runc-capfilter crictl helm kind flannel
#        kube-network-policies registry prometheus (no GROUP = all but prometheus, which only the
#        dashboard and alert-rule tests use: their marker builds it). KUBE_BIN_DIR=<dir>
#        overrides the cache directory.
#        hack/kube/build.sh --print-bin-dir   prints the bin dir and exits.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/kube/versions.env
source "${HERE}/versions.env"

export PATH="${PATH}:/usr/local/go/bin:${HOME}/go/bin"
CACHE_ROOT="${XDG_CACHE_HOME:-${HOME}/.cache}/snapshotjob/kube/${KUBE_VERSION}"
BIN_DIR="${KUBE_BIN_DIR:-${CACHE_ROOT}/bin}"
TIMES_FILE="${CACHE_ROOT}/build-times.tsv"
PARALLEL="${KUBE_BUILD_PARALLEL:-2}"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  echo "${BIN_DIR}"
  exit 0
fi

mkdir -p "${BIN_DIR}" "${CACHE_ROOT}"
# Two test sessions on a cold machine may both ask for a build: serialise them, the second
# then finds everything up to date.
exec 9>"${CACHE_ROOT}/build.lock"
flock 9
command -v go >/dev/null || { echo "ERROR: go toolchain not found (need Go >= 1.24)" >&2; exit 1; }

export CGO_ENABLED=0
export GOFLAGS="-p=${PARALLEL} -buildvcs=false -trimpath"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# stamp_of MODULE_DIR LDFLAGS -> a hash of everything that decides the binary's content
# (STAMP_EXTRA_DIRS: local modules the build replaces into it; BUILD_TAGS: go build -tags).
stamp_of() {
  local dir="$1" flags="$2" extra
  { cat "${dir}"/go.mod "${dir}"/go.sum "${dir}"/*.go 2>/dev/null; echo "${flags}"; go version
    [[ -z "${BUILD_TAGS:-}" ]] || echo "tags=${BUILD_TAGS}"
    for extra in ${STAMP_EXTRA_DIRS:-}; do find "${extra}" -type f -print0 | sort -z | xargs -0 cat; done
  } | sha256sum | cut -d' ' -f1
}

# build_one NAME MODULE_DIR PACKAGE LDFLAGS
build_one() {
  local name="$1" dir="$2" pkg="$3" flags="$4"
  local out="${BIN_DIR}/${name}" stamp
  stamp="$(stamp_of "${dir}" "${flags}")"
  if [[ -x "${out}" && -f "${out}.stamp" && "$(cat "${out}.stamp")" == "${stamp}" ]]; then
    log "Skipping build, up to date: binary=${name}"
    return 0
  fi
  log "Building binary=${name} package=${pkg}"
  local start end
  start=$(date +%s)
  (cd "${dir}" && nice -n 19 go build ${BUILD_TAGS:+"-tags=${BUILD_TAGS}"} -ldflags "${flags}" \
    -o "${out}.tmp" "${pkg}")
  mv -f "${out}.tmp" "${out}"
  echo "${stamp}" > "${out}.stamp"
  end=$(date +%s)
  printf '%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "${name}" "$((end - start))" >> "${TIMES_FILE}"
  log "Built binary=${name} seconds=$((end - start))"
}

kube_ldflags() {
  # Mirrors hack/lib/version.sh of Kubernetes: the same variables in both version packages.
  local ver="${KUBE_VERSION}" major minor build_date flags="-s -w" pkg
  major="${ver#v}"; major="${major%%.*}"
  minor="${ver#v*.}"; minor="${minor%%.*}"
  build_date="$(go mod download -json "k8s.io/kubernetes@${ver}" 2>/dev/null \
    | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' | head -1)"
  build_date="${build_date:-1970-01-01T00:00:00Z}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${ver}"
    flags+=" -X ${pkg}.gitMajor=${major}"
    flags+=" -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitCommit=0000000000000000000000000000000000000000"
    flags+=" -X ${pkg}.gitTreeState=archive"
    flags+=" -X ${pkg}.buildDate=${build_date}"
  done
  echo "${flags}"
}

build_kubernetes() {
  local dir="${HERE}/modules/kubernetes" flags name
  flags="$(kube_ldflags)"
  for name in kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm kubelet \
              kube-proxy; do
    build_one "${name}" "${dir}" "k8s.io/kubernetes/cmd/${name}" "${flags}"
  done
}

build_etcd() {
  local dir="${HERE}/modules/etcd"
  build_one etcd "${dir}" . \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-${ETCD_VERSION}"
}

build_coredns() {
  build_one coredns "${HERE}/modules/coredns" . \
    "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-${COREDNS_VERSION}"
}

build_crictl() {
  # The checksum database reachable here lacks cri-tools; go.sum pins its hashes instead.
  GONOSUMDB=sigs.k8s.io/cri-tools build_one crictl "${HERE}/modules/crictl" \
    sigs.k8s.io/cri-tools/cmd/crictl \
    "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}"
}

build_pause() {
  build_one pause "${HERE}/modules/pause" . "-s -w"
}

build_runc_capfilter() {
  build_one runc-capfilter "${HERE}/modules/runc-capfilter" . "-s -w"
}

build_helm() {
  # As helm's own Makefile: the Kubernetes version helm assumes without a cluster (helm
  # template, helm lint; checked against a chart's kubeVersion) is its client-go's, v0.N ->
  # 1.N. Unset, it would be 1.20.
  local dir="${HERE}/modules/helm" client_go major minor flags pkg
  client_go="$(cd "${dir}" && go list -f '{{.Version}}' -m k8s.io/client-go)"
  client_go="${client_go#v}"
  major=$(( ${client_go%%.*} + 1 )); minor="${client_go#*.}"; minor="${minor%%.*}"
  flags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    flags+=" -X ${pkg}.k8sVersionMajor=${major} -X ${pkg}.k8sVersionMinor=${minor}"
  done
  build_one helm "${dir}" helm.sh/helm/v3/cmd/helm "${flags}"
}

build_kind() {
  build_one kind "${HERE}/modules/kind" sigs.k8s.io/kind "-s -w"
}

build_flannel() {
  # flanneld: the Pod network across kind nodes (host-gw backend; see docs/development/kubernetes-testbed.md).
  # Its udp backend is cgo, so this one binary needs a C compiler; linked statically as
  # upstream does. The stand-in SDK modules (see its go.mod) are part of its inputs.
  CGO_ENABLED=1 STAMP_EXTRA_DIRS="${HERE}/modules/stubs/tencentcloud-common ${HERE}/modules/stubs/tencentcloud-vpc" \
    build_one flanneld "${HERE}/modules/flannel" github.com/flannel-io/flannel \
    "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=${FLANNEL_VERSION} -extldflags -static"
}

build_kube_network_policies() {
  # kube-network-policies: the NetworkPolicy enforcement of the kind clusters (flannel enforces
  # none; see docs/development/kubernetes-testbed.md), with nfqueue-compat.patch (see its
  # header). The go command neither patches nor overlays files of its module cache, so the
  # build runs from a staging copy: upstream's module with the patch applied, and this wrapper
  # module replacing sigs.k8s.io/kube-network-policies with it. The patch is in the wrapper's
  # directory, hence part of the stamp.
  local dir="${HERE}/modules/kube-network-policies" src work
  src="$(cd "${dir}" && go mod download sigs.k8s.io/kube-network-policies \
    && go list -m -f '{{.Dir}}' sigs.k8s.io/kube-network-policies)"
  work="${CACHE_ROOT}/src/kube-network-policies"
  rm -rf "${work}"
  mkdir -p "${work}/wrapper"
  cp -R "${src}" "${work}/upstream"
  chmod -R u+w "${work}/upstream"
  # git apply as a plain patch tool: no repository above the staging copy is looked for.
  (cd "${work}/upstream" && GIT_CEILING_DIRECTORIES="${work}" git apply "${dir}/nfqueue-compat.patch") \
    || { echo "ERROR: ${dir}/nfqueue-compat.patch does not apply to ${src}" >&2; exit 1; }
  cp "${dir}/go.mod" "${dir}/go.sum" "${work}/wrapper/"
  (cd "${work}/wrapper" && go mod edit -replace sigs.k8s.io/kube-network-policies=../upstream)
  STAMP_EXTRA_DIRS="${dir}" build_one kube-network-policies "${work}/wrapper" \
    sigs.k8s.io/kube-network-policies/cmd "-s -w"
}

build_registry() {
  # The test bed's OCI registry (hack/kube/registry.sh): the cluster tier pushes its images
  # and the packaged chart there and installs from it. A wrapper module (see its main.go):
  # upstream's cmd/registry with the filesystem and in-memory storage drivers only.
  build_one registry "${HERE}/modules/registry" . \
    "-s -w -X github.com/distribution/distribution/v3/version.version=${REGISTRY_VERSION} -X github.com/distribution/distribution/v3/version.revision=module-${REGISTRY_VERSION}"
}

build_prometheus() {
  # Prometheus and promtool: the dashboard is rendered from a real Prometheus' query API and
  # the chart's alert rules are checked and unit-tested with promtool (docs/reference/metrics.md).
  # remove_all_sd keeps the static, file and HTTP service discoveries only (the tests list
  # their targets), which spares compiling the cloud providers' SDKs. Without the
  # builtinassets tag the web UI is not embedded, so no npm build: the HTTP API needs none.
  # Prometheus 3.x is tagged v0.3MM.P as a Go module: v0.316.0 is Prometheus 3.16.0.
  local dir="${HERE}/modules/prometheus" release published flags name
  release="${PROMETHEUS_VERSION#v0.}"
  release="${release:0:1}.${release:1}"
  # The module's publish time (`go list -m`: `go mod download -json` has no Time field).
  published="$(go list -m -json "github.com/prometheus/prometheus@${PROMETHEUS_VERSION}" \
    2>/dev/null | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' | head -1)"
  flags="-s -w -X github.com/prometheus/common/version.Version=${release}"
  flags+=" -X github.com/prometheus/common/version.Revision=module-${PROMETHEUS_VERSION}"
  flags+=" -X github.com/prometheus/common/version.BuildDate=${published:-1970-01-01T00:00:00Z}"
  for name in prometheus promtool; do
    BUILD_TAGS=remove_all_sd build_one "${name}" "${dir}" \
      "github.com/prometheus/prometheus/cmd/${name}" "${flags}"
  done
}

groups=("$@")
if [[ ${#groups[@]} -eq 0 ]]; then
  groups=(kubernetes etcd coredns pause runc-capfilter crictl helm kind flannel
          kube-network-policies registry)
fi
total_start=$(date +%s)
for g in "${groups[@]}"; do
  case "${g}" in
    kubernetes|etcd|coredns|crictl|pause|helm|kind|flannel|registry|prometheus) "build_${g}" ;;
    runc-capfilter) build_runc_capfilter ;;
    kube-network-policies) build_kube_network_policies ;;
    *) echo "ERROR: unknown group=${g}" >&2; exit 2 ;;
  esac
done
log "Build finished groups='${groups[*]}' seconds=$(( $(date +%s) - total_start )) bin_dir=${BIN_DIR}"
