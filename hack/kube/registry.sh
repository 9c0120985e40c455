#!/usr/bin/env bash
# The test bed's OCI registry: the CNCF distribution registry, with TLS and basic auth.
#
# Why: the cluster tier installs the chart the way users do, from a registry
# (`helm install oci://...`), and its nodes pull the images with Kubernetes pull Secrets
# (imagePullSecrets) instead of finding them preloaded by `kind load`. No registry is
# reachable from this project's machines, so one runs here: the `registry` binary built from
# its Go module (hack/kube/build.sh registry), in an image FROM the debootstrap base, as the
# container sj-registry (port 5000) on the kind Docker network and published on 127.0.0.1.
#
# Two names, one registry: the nodes pull sj-registry:5000/<repository> (the container's name
# on the kind network), this machine pushes to 127.0.0.1:<SJ_REGISTRY_HOST_PORT>/<repository>.
#
# Everything it generates lives in ${XDG_CACHE_HOME:-~/.cache}/snapshotjob/registry/: a CA and
# the server's certificate (openssl; SANs sj-registry, localhost, 127.0.0.1), the user
# `snapshotjob` with a generated password (htpasswd, bcrypt), the registry's storage (data/,
# kept across `down`), the docker and helm client configurations logged in to it.
# This machine's dockerd trusts the CA through /etc/docker/certs.d/127.0.0.1:<port>/ca.crt;
# the kind nodes' containerd through /etc/containerd/certs.d/sj-registry:5000/ (`connect`).
# Credentials never go into containerd: Pods pull with a kubernetes.io/dockerconfigjson Secret.
#
# Usage: hack/kube/registry.sh up|down|status|connect|env|push IMAGE...|push-chart DIR|secret NS [NAME]
#   up          build what is missing, generate the CA and credentials once, start the
#               container, trust the CA on this machine, log docker and helm in
#   down        remove the container (its storage and credentials stay in the cache)
#   status      succeeds when the container runs and answers with TLS
#   connect     attach it to the kind network and make every node of the cluster
#               KIND_CLUSTER_NAME trust its CA (containerd's certs.d; a node whose containerd
#               lacks config_path gets it and a containerd restart)
#   env         the shell variables the tests and the demo read (SJ_REGISTRY_*)
#   push IMAGE  tag and push local images; prints `IMAGE <pull reference by digest>` a line
#   push-chart DIR  `helm package` + `helm push` to oci://<registry>/charts; prints the version
#   secret NS [NAME]  create or update the pull Secret (default name sj-registry) in namespace
#               NS with KUBECONFIG's cluster
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY_NAME="sj-registry"
REGISTRY_PORT=5000
REGISTRY_HOST_PORT="${SJ_REGISTRY_HOST_PORT:-5000}"
PULL_HOST="${REGISTRY_NAME}:${REGISTRY_PORT}"
PUSH_HOST="127.0.0.1:${REGISTRY_HOST_PORT}"
REGISTRY_USER="snapshotjob"
REGISTRY_IMAGE="snapshotjob/registry:${REGISTRY_VERSION}"
REGISTRY_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/snapshotjob/registry"
SECRET_NAME="${SJ_REGISTRY_SECRET:-sj-registry}"
export DOCKER_CONFIG="${REGISTRY_DIR}/docker"
HELM_REGISTRY_CONFIG="${REGISTRY_DIR}/helm/registry.json"
KIND_NETWORK="kind"

pw() { cat "${REGISTRY_DIR}/password"; }

# pki_and_credentials: the CA, the server's certificate and the htpasswd file, made once.
pki_and_credentials() {
  local d="${REGISTRY_DIR}" ext
  mkdir -p "${d}/data" "${d}/docker" "${d}/helm"
  chmod 700 "${d}"
  if [[ ! -s "${d}/ca.crt" ]]; then
    log "Generating the registry's CA dir=${d}"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=snapshotjob test bed registry CA" -keyout "${d}/ca.key" -out "${d}/ca.crt" \
      2>/dev/null
    rm -f "${d}/server.crt"
  fi
  if [[ ! -s "${d}/server.crt" ]]; then
    ext="$(mktemp)"
    printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
      "${REGISTRY_NAME}" >"${ext}"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=${REGISTRY_NAME}" -keyout "${d}/server.key" -out "${d}/server.csr" 2>/dev/null
    openssl x509 -req -in "${d}/server.csr" -CA "${d}/ca.crt" -CAkey "${d}/ca.key" \
      -CAcreateserial -days 3650 -extfile "${ext}" -out "${d}/server.crt" 2>/dev/null
    rm -f "${ext}" "${d}/server.csr"
    chmod 644 "${d}/server.key"
  fi
  if [[ ! -s "${d}/password" ]]; then
    (umask 077; openssl rand -hex 24 >"${d}/password")
    rm -f "${d}/htpasswd"
  fi
  if [[ ! -s "${d}/htpasswd" ]]; then
    # bcrypt, the only hash the registry's htpasswd accepts (glibc's crypt: $2b$).
    SJ_PW="$(pw)" python3 -W ignore -c 'import crypt, os, sys
print(sys.argv[1] + ":" + crypt.crypt(os.environ["SJ_PW"], crypt.mksalt(crypt.METHOD_BLOWFISH)))' \
      "${REGISTRY_USER}" >"${d}/htpasswd"
  fi
}

# build_image: FROM the project's debootstrap base + the binary + a fixed configuration.
build_image() {
  need_bins registry
  bash "${KUBE_HACK_DIR}/images.sh" base
  local ctx inputs
  ctx="$(mktemp -d)"
  cp "${KUBE_BIN_DIR}/registry" "${ctx}/registry"
  cat >"${ctx}/config.yml" <<'EOF'
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: /var/lib/registry}
  delete: {enabled: true}
http:
  addr: :5000
  tls:
    certificate: /etc/registry/server.crt
    key: /etc/registry/server.key
auth:
  htpasswd:
    realm: snapshotjob
    path: /etc/registry/htpasswd
EOF
  cat >"${ctx}/Dockerfile" <<EOF
FROM ${BASE_IMAGE}
COPY registry /usr/local/bin/registry
COPY config.yml /etc/distribution/config.yml
# distribution v3 exports OpenTelemetry traces to localhost:4318 unless told not to.
ENV OTEL_TRACES_EXPORTER=none
EXPOSE 5000
ENTRYPOINT ["/usr/local/bin/registry", "serve", "/etc/distribution/config.yml"]
EOF
  inputs="$(files_hash "${ctx}/registry" "${ctx}/config.yml" "${ctx}/Dockerfile" "${BASH_SOURCE[0]}")"
  if image_fresh "${REGISTRY_IMAGE}" "${inputs}"; then
    rm -rf "${ctx}"
    return 0
  fi
  log "Building image=${REGISTRY_IMAGE}"
  docker_build "${REGISTRY_IMAGE}" "${ctx}" --label "snapshotjob.inputs=${inputs}"
  rm -rf "${ctx}"
}

running() {
  [[ "$(docker inspect --format '{{.State.Running}}' "${REGISTRY_NAME}" 2>/dev/null)" == true ]]
}

# answers: the registry speaks TLS with our CA and asks for credentials (401 without them).
answers() {
  local code
  code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 \
    --cacert "${REGISTRY_DIR}/ca.crt" "https://${PUSH_HOST}/v2/" 2>/dev/null || true)"
  [[ "${code}" == 401 ]]
}

cmd_up() {
  ensure_docker
  pki_and_credentials
  build_image
  local want
  want="$(docker image inspect --format '{{.Id}}' "${REGISTRY_IMAGE}")"
  if running && [[ "$(docker inspect --format '{{.Image}}' "${REGISTRY_NAME}")" != "${want}" ]]; then
    log "Replacing the registry container: its image changed"
    docker rm -f "${REGISTRY_NAME}" >/dev/null
  fi
  if ! running; then
    docker rm -f "${REGISTRY_NAME}" >/dev/null 2>&1 || true
    docker run -d --name "${REGISTRY_NAME}" --restart unless-stopped \
      -p "127.0.0.1:${REGISTRY_HOST_PORT}:${REGISTRY_PORT}" \
      -v "${REGISTRY_DIR}/data:/var/lib/registry" \
      -v "${REGISTRY_DIR}/server.crt:/etc/registry/server.crt:ro" \
      -v "${REGISTRY_DIR}/server.key:/etc/registry/server.key:ro" \
      -v "${REGISTRY_DIR}/htpasswd:/etc/registry/htpasswd:ro" \
      "${REGISTRY_IMAGE}" >/dev/null
    log "Started registry container=${REGISTRY_NAME} push=${PUSH_HOST} pull=${PULL_HOST}"
  fi
  local _
  for _ in $(seq 1 50); do answers && break; sleep 0.2; done
  answers || { docker logs --tail 30 "${REGISTRY_NAME}" >&2; die "Registry does not answer on https://${PUSH_HOST}/v2/"; }
  # This machine's dockerd reads certs.d per push: no restart.
  mkdir -p "/etc/docker/certs.d/${PUSH_HOST}"
  cp "${REGISTRY_DIR}/ca.crt" "/etc/docker/certs.d/${PUSH_HOST}/ca.crt"
  pw | docker login "${PUSH_HOST}" -u "${REGISTRY_USER}" --password-stdin >/dev/null 2>&1 \
    || die "docker login ${PUSH_HOST} failed"
  need_bins helm
  pw | "${KUBE_BIN_DIR}/helm" registry login "${PUSH_HOST}" --registry-config "${HELM_REGISTRY_CONFIG}" \
    --ca-file "${REGISTRY_DIR}/ca.crt" -u "${REGISTRY_USER}" --password-stdin >/dev/null 2>&1 \
    || die "helm registry login ${PUSH_HOST} failed"
  if docker network inspect "${KIND_NETWORK}" >/dev/null 2>&1; then
    connect_network
  fi
  log "Registry up name=${REGISTRY_NAME} push=${PUSH_HOST} pull=${PULL_HOST} dir=${REGISTRY_DIR}"
}

connect_network() {
  if ! docker inspect --format '{{json .NetworkSettings.Networks}}' "${REGISTRY_NAME}" \
      | grep -q "\"${KIND_NETWORK}\""; then
    docker network connect "${KIND_NETWORK}" "${REGISTRY_NAME}"
    log "Registry attached network=${KIND_NETWORK} name=${REGISTRY_NAME}"
  fi
}

# cmd_connect: the kind network, and containerd's trust on every node (no credentials).
cmd_connect() {
  running || die "Registry not running: hack/kube/registry.sh up"
  connect_network
  local node nodes dir="/etc/containerd/certs.d/${PULL_HOST}"
  mapfile -t nodes < <("${KUBE_BIN_DIR}/kind" get nodes --name "${KIND_CLUSTER_NAME}" 2>/dev/null)
  [[ ${#nodes[@]} -gt 0 ]] || die "No kind cluster name=${KIND_CLUSTER_NAME}"
  for node in "${nodes[@]}"; do
    docker exec "${node}" mkdir -p "${dir}"
    docker cp "${REGISTRY_DIR}/ca.crt" "${node}:${dir}/ca.crt"
    printf 'server = "https://%s"\n\n[host."https://%s"]\n  capabilities = ["pull", "resolve"]\n  ca = "%s/ca.crt"\n' \
      "${PULL_HOST}" "${PULL_HOST}" "${dir}" | docker exec -i "${node}" tee "${dir}/hosts.toml" >/dev/null
    # hack/kube/cluster.sh creates clusters with config_path (containerdConfigPatches); an
    # older cluster gets it here, which containerd reads only when it starts.
    if ! docker exec "${node}" grep -q 'config_path' /etc/containerd/config.toml; then
      printf '\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n' \
        | docker exec -i "${node}" tee -a /etc/containerd/config.toml >/dev/null
      docker exec "${node}" systemctl restart containerd
      log "Restarted containerd with config_path node=${node}"
    fi
  done
  log "Registry trusted by nodes cluster=${KIND_CLUSTER_NAME} nodes=${#nodes[@]} host=${PULL_HOST}"
}

cmd_down() {
  docker rm -f "${REGISTRY_NAME}" >/dev/null 2>&1 || true
  log "Registry removed name=${REGISTRY_NAME} (storage kept in ${REGISTRY_DIR}/data)"
}

cmd_status() {
  running && answers
}

cmd_env() {
  cat <<EOF
SJ_REGISTRY_PUSH=${PUSH_HOST}
SJ_REGISTRY_PULL=${PULL_HOST}
SJ_REGISTRY_USER=${REGISTRY_USER}
SJ_REGISTRY_PASSWORD_FILE=${REGISTRY_DIR}/password
SJ_REGISTRY_CA=${REGISTRY_DIR}/ca.crt
SJ_REGISTRY_SECRET=${SECRET_NAME}
DOCKER_CONFIG=${DOCKER_CONFIG}
HELM_REGISTRY_CONFIG=${HELM_REGISTRY_CONFIG}
EOF
}

# cmd_push IMAGE...: pushes each under the same repository and tag; an unchanged layer is
# only a HEAD request. Prints "IMAGE sj-registry:5000/<repository>@sha256:..." per image.
cmd_push() {
  [[ $# -gt 0 ]] || die "usage: registry.sh push IMAGE..."
  cmd_status || die "Registry not running: hack/kube/registry.sh up"
  local image target digest start
  for image in "$@"; do
    start=$(date +%s)
    target="${PUSH_HOST}/${image}"
    docker tag "${image}" "${target}"
    docker push "${target}" >/tmp/sj-registry-push.$$ 2>&1 \
      || { cat /tmp/sj-registry-push.$$ >&2; rm -f /tmp/sj-registry-push.$$; die "docker push ${target} failed"; }
    digest="$(sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p' /tmp/sj-registry-push.$$ | tail -1)"
    rm -f /tmp/sj-registry-push.$$
    [[ -n "${digest}" ]] || die "No digest in docker push's output image=${target}"
    log "Pushed image=${image} digest=${digest} seconds=$(( $(date +%s) - start ))"
    echo "${image} ${PULL_HOST}/${image%:*}@${digest}"
  done
}

# cmd_push_chart DIR: packages the chart and pushes it to oci://<registry>/charts.
cmd_push_chart() {
  local dir="${1:?usage: registry.sh push-chart CHART_DIR}" out archive
  cmd_status || die "Registry not running: hack/kube/registry.sh up"
  need_bins helm
  out="$(mktemp -d)"
  "${KUBE_BIN_DIR}/helm" package "${dir}" --destination "${out}" >/dev/null
  archive="$(ls "${out}"/*.tgz)"
  "${KUBE_BIN_DIR}/helm" push "${archive}" "oci://${PUSH_HOST}/charts" \
    --registry-config "${HELM_REGISTRY_CONFIG}" --ca-file "${REGISTRY_DIR}/ca.crt" >&2
  rm -rf "${out}"
  archive="${archive##*/}"; archive="${archive%.tgz}"
  log "Pushed chart=oci://${PUSH_HOST}/charts/${archive%-*} version=${archive##*-}"
  echo "${archive##*-}"
}

cmd_secret() {
  local namespace="${1:?usage: registry.sh secret NAMESPACE [NAME]}" name="${2:-${SECRET_NAME}}"
  "${KUBE_BIN_DIR}/kubectl" -n "${namespace}" create secret docker-registry "${name}" \
    --docker-server="${PULL_HOST}" --docker-username="${REGISTRY_USER}" \
    --docker-password="$(pw)" --dry-run=client -o yaml \
    | "${KUBE_BIN_DIR}/kubectl" apply -f - >/dev/null
  log "Pull Secret applied namespace=${namespace} name=${name} server=${PULL_HOST}"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  connect) cmd_connect ;;
  env) cmd_env ;;
  push) shift; cmd_push "$@" ;;
  push-chart) shift; cmd_push_chart "$@" ;;
  secret) shift; cmd_secret "$@" ;;
  *) die "usage: $0 up|down|status|connect|env|push IMAGE...|push-chart DIR|secret NAMESPACE [NAME]" ;;
esac
