#!/usr/bin/env bash
# Build the project's container images locally, without any container registry.
#
# Every role has its own image from a plain multi-stage Dockerfile next to this script (names
# in images.env; docs/development/e2e.md), built with `docker build` from BASE_IMAGE (this
# machine's debootstrap base of hack/kube/images.sh: no registry serves a public slim base
# here). The build contexts hold the third-party wheels (pinned by requirements.lock), this
# project's wheel and the jars hack/install.sh fetched, so a build reaches no network but Debian's.
#
# Product images (what a release tags, SJ_IMAGE_TAG, default dev):
#   snapshotjob/operator         the operator: Python and its dependencies, no JVM, no Spark
#   snapshotjob/spark-runtime    the drivers and executors: Java 17, PySpark, the runtime's
#                                 dependencies, Spark's Kafka connector, Delta Lake, s3a,
#                                 the chunk jars (jvm/)
#   snapshotjob/member           the store's Hazelcast members: Java 17, the Hazelcast jar
# Built on top of those (never released):
#   snapshotjob/examples:dev     spark-runtime + examples/ on PYTHONPATH (`make demo`,
#                                 examples/kubernetes/snapshotjob.yaml)
#   snapshotjob/runtime-e2e:dev  examples + tests/e2e/pipelines (the end-to-end tests' jobs)
#   my-pipeline:dev              spark-runtime + examples/custom-image: the user image of
#                                 docs/getting-started/your-pipeline.md (see build_custom)
# Test-only servers: snapshotjob/test-kafka-broker:dev (examples/kubernetes/kafka.yaml),
# snapshotjob/test-s3proxy:dev (examples/kubernetes/s3proxy.yaml), and
# snapshotjob/postgres:dev, Debian's postgresql for the in-cluster database (build_postgres).
#
# `app` builds the product images and examples; `split` the five role images, each followed by
# its size and its SBOM (dist/sbom/<target>.spdx.json; SBOM=0 skips them).
#
# Usage: hack/images/build.sh [app|e2e|examples|postgres|custom|split|operator|spark-runtime|
#                              member|test-kafka-broker|test-s3proxy]...   (default: app)
# FORCE=1 rebuilds every image whose inputs are hashed (not debian-base).
set -euo pipefail
IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${IMAGES_DIR}/../.." && pwd)"
# shellcheck source=hack/kube/lib.sh
source "${REPO_ROOT}/hack/kube/lib.sh"

SJ_CACHE="${SJ_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/snapshotjob}"
# SPARK_VERSION and HAZELCAST_VERSION, as hack/install.sh fetched them.
# shellcheck source=hack/versions.env
source "${REPO_ROOT}/hack/versions.env"
# The exact versions of every third-party package (hack/lock.sh), as in `make install`.
LOCK_FILE="${REPO_ROOT}/requirements.lock"
HAZELCAST_JAR="${SJ_HAZELCAST_JAR:-${SJ_CACHE}/jars/hazelcast-${HAZELCAST_VERSION}.jar}"
# Spark's Kafka connector for the drivers' KafkaSource (fetched by hack/install.sh).
SPARK_KAFKA_DIR="${SJ_CACHE}/jars/spark-kafka-${SPARK_VERSION}"
# Delta Lake for the drivers' DeltaSink (fetched by hack/install.sh).
DELTA_DIR="${SJ_CACHE}/jars/delta-${DELTA_VERSION}"
# hadoop-aws and the AWS SDK's modules, for s3a:// paths (fetched by hack/install.sh).
S3A_DIR="${SJ_CACHE}/jars/s3a-${HADOOP_AWS_VERSION}"
# The executors' chunk writer and reader, built from jvm/ by hack/install.sh.
CHUNKS_DIR="${SJ_CACHE}/jars/snapshotjob-chunks"
# The Kafka broker's jars for the `kafka-broker` launcher (fetched by hack/install.sh).
KAFKA_LIBS="${SJ_CACHE}/kafka/${KAFKA_VERSION:-4.4.0}/libs"
# The S3-compatible server's jar for the `s3-server` launcher (fetched by hack/install.sh).
S3PROXY_VERSION="${S3PROXY_VERSION:-$(tr -d '[:space:]' <"${REPO_ROOT}/testbed/s3proxy.version")}"
S3PROXY_JAR="${SJ_CACHE}/jars/s3proxy-${S3PROXY_VERSION}-jar-with-dependencies.jar"
WHEEL_ROOT="${SJ_CACHE}/wheels"
VENV_PY="${REPO_ROOT}/${VENV:-.venv}/bin/python"

# shellcheck source=hack/images/images.env
source "${IMAGES_DIR}/images.env"
# The product images' tag: dev here, the version in a release (hack/release.py).
SJ_IMAGE_TAG="${SJ_IMAGE_TAG:-dev}"
OPERATOR_IMAGE="${OPERATOR_IMAGE%:*}:${SJ_IMAGE_TAG}"
SPARK_RUNTIME_IMAGE="${SPARK_RUNTIME_IMAGE%:*}:${SJ_IMAGE_TAG}"
MEMBER_IMAGE="${MEMBER_IMAGE%:*}:${SJ_IMAGE_TAG}"
EXAMPLES_IMAGE="${EXAMPLES_IMAGE:-snapshotjob/examples:dev}"
E2E_IMAGE="${E2E_IMAGE:-snapshotjob/runtime-e2e:dev}"
POSTGRES_IMAGE="${POSTGRES_IMAGE:-snapshotjob/postgres:dev}"
CUSTOM_IMAGE="${CUSTOM_IMAGE:-my-pipeline:dev}"
POSTGRES_UID=10002

timed() {
  local what="$1" start
  shift
  start=$(date +%s)
  "$@"
  log "Step done step=${what} seconds=$(( $(date +%s) - start ))"
}

image_id() { docker image inspect --format '{{.Id}}' "$1"; }

# The third-party wheels, pinned by requirements.lock (the versions `make install` put into
# .venv, which every test ran with), built with the host's pip cache: warm, this takes seconds.
# wheelhouse EXTRAS: the wheels of .[EXTRAS], one folder each.
wheelhouse() {
  local constraints hash dir extras="$1"
  [[ -x "${VENV_PY}" ]] || die "No virtualenv at ${VENV_PY}: run 'make install'"
  constraints="$(grep -v '^#' "${LOCK_FILE}")"
  hash="$(printf '%s\n%s' "${constraints}" "$(cat "${REPO_ROOT}/pyproject.toml")" \
    | sha256sum | cut -c1-16)"
  dir="${WHEEL_ROOT}/${hash}"
  dir="${dir}-${extras//,/-}"
  if [[ ! -f "${dir}/.complete" ]]; then
    log "Building wheelhouse dir=${dir}"
    rm -rf "${dir}"
    mkdir -p "${dir}/wheels"
    printf '%s\n' "${constraints}" >"${dir}/constraints.txt"
    "${VENV_PY}" -m pip wheel --quiet --wheel-dir "${dir}/wheels" \
      --constraint "${dir}/constraints.txt" "${REPO_ROOT}[${extras}]" >&2 \
      || die "pip wheel failed"
    # The project itself goes into the top image; only its dependencies stay here.
    rm -f "${dir}"/wheels/snapshotjob-*.whl
    touch "${dir}/.complete"
  fi
  echo "${dir}"
}

# The modules that build the drivers' class data sharing archive (spark_runtime/cds.py) in
# spark-runtime.Dockerfile: that layer depends only on Java, PySpark and these.
CDS_SOURCES=(spark_runtime/__init__.py spark_runtime/cds.py spark_runtime/session.py)

# build_on IMAGE INPUTS CONTEXT [DOCKER_BUILD_ARGS...] : builds IMAGE from CONTEXT (which holds
# its Dockerfile) unless it was built from INPUTS; removes CONTEXT either way.
build_on() {
  local image="$1" inputs="$2" ctx="$3"
  shift 3
  if image_fresh "${image}" "${inputs}"; then
    log "Image up to date image=${image}"
  else
    docker_build "${image}" "${ctx}" --label "snapshotjob.inputs=${inputs}" "$@"
    log "Built image=${image}"
  fi
  rm -rf "${ctx}"
}

# The examples' job image: spark-runtime plus examples/ on PYTHONPATH (examples.Dockerfile).
# No SBOM for the runtime underneath: `split` and a release write those.
build_examples() {
  local inputs ctx
  SBOM=0 build_split spark-runtime
  inputs="$( { image_id "${SPARK_RUNTIME_IMAGE}"; sha256sum "${IMAGES_DIR}/examples.Dockerfile"
    (cd "${REPO_ROOT}" && find examples -type f -not -path '*/__pycache__/*' | LC_ALL=C sort \
      | xargs sha256sum); } | sha256sum | cut -d' ' -f1)"
  ctx="$(mktemp -d)"
  mkdir -p "${ctx}/app"
  cp -r "${REPO_ROOT}/examples" "${ctx}/app/examples"
  find "${ctx}/app" -name __pycache__ -prune -exec rm -rf {} +
  cp "${IMAGES_DIR}/examples.Dockerfile" "${ctx}/Dockerfile"
  build_on "${EXAMPLES_IMAGE}" "${inputs}" "${ctx}" \
    --build-arg "RUNTIME_IMAGE=${SPARK_RUNTIME_IMAGE}"
}

# The e2e image adds the end-to-end tests' pipeline modules to the examples image; the cluster
# tier's jobs run it.
build_e2e() {
  local inputs ctx
  build_examples
  inputs="$( { image_id "${EXAMPLES_IMAGE}"; (cd "${REPO_ROOT}" && find tests/e2e/pipelines \
    -name '*.py' -type f | LC_ALL=C sort | xargs sha256sum); } | sha256sum | cut -d' ' -f1)"
  ctx="$(mktemp -d)"
  mkdir -p "${ctx}/e2e_pipelines"
  cp "${REPO_ROOT}"/tests/e2e/pipelines/*.py "${ctx}/e2e_pipelines/"
  cat >"${ctx}/Dockerfile" <<EOF
FROM ${EXAMPLES_IMAGE}
COPY e2e_pipelines/ /opt/snapshotjob/app/e2e_pipelines/
EOF
  build_on "${E2E_IMAGE}" "${inputs}" "${ctx}"
}

# The user image of examples/custom-image (docs/getting-started/your-pipeline.md), built as that
# page says (FROM spark-runtime), with its dependencies from the wheels hack/install.sh
# downloaded: the build container does not trust this machine's egress proxy, and
# tests/e2e/test_custom_image_kind.py runs it.
build_custom() {
  local inputs ctx wheels example="${REPO_ROOT}/examples/custom-image"
  SBOM=0 build_split spark-runtime
  wheels="${WHEEL_ROOT}/custom-image"
  cmp -s "${example}/requirements.txt" "${wheels}/.requirements" \
    || die "No wheels of examples/custom-image/requirements.txt in ${wheels}: run make install"
  inputs="$( { image_id "${SPARK_RUNTIME_IMAGE}"; (cd "${example}" && find . -type f \
    | LC_ALL=C sort | xargs sha256sum); (cd "${wheels}" && ls); } | sha256sum | cut -d' ' -f1)"
  ctx="$(mktemp -d)"
  cp -r "${example}/." "${ctx}/"
  cp -r "${wheels}" "${ctx}/wheels"
  build_on "${CUSTOM_IMAGE}" "${inputs}" "${ctx}" \
    --build-arg "RUNTIME_IMAGE=${SPARK_RUNTIME_IMAGE}" \
    --build-arg "PIP_INSTALL_ARGS=--no-index --find-links=/tmp/deps"
}

# The in-cluster PostgreSQL's start script: a first start initialises ${PGDATA} (C.UTF-8,
# password auth from anywhere, since it only serves the cluster network), creates
# ${POSTGRES_USER} and ${POSTGRES_DB} in single-user mode, then runs the server in the
# foreground. max_prepared_transactions > 0 because the exactly-once sink uses
# PREPARE TRANSACTION; the socket goes to /tmp, the one directory a non-root user may write.
postgres_start_script() {
  cat <<'EOF'
#!/bin/bash
set -euo pipefail
: "${PGDATA:=/var/lib/postgresql/data/pgdata}" "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=${POSTGRES_USER}}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
: "${POSTGRES_MAX_PREPARED_TRANSACTIONS:=64}"
export PATH="/opt/postgresql/bin:${PATH}"
if [[ ! -s "${PGDATA}/PG_VERSION" ]]; then
  mkdir -p "${PGDATA}"
  chmod 700 "${PGDATA}"
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD}" >"${pwfile}"
  initdb --pgdata="${PGDATA}" --username=postgres --pwfile="${pwfile}" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "${pwfile}"
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"${PGDATA}/pg_hba.conf"
  echo "host all all ::/0 scram-sha-256" >>"${PGDATA}/pg_hba.conf"
  password="${POSTGRES_PASSWORD//\'/\'\'}"
  if [[ "${POSTGRES_USER}" != postgres ]]; then
    echo "CREATE ROLE \"${POSTGRES_USER}\" LOGIN PASSWORD '${password}'" \
      | postgres --single -D "${PGDATA}" postgres >/dev/null
  fi
  if [[ "${POSTGRES_DB}" != postgres ]]; then
    echo "CREATE DATABASE \"${POSTGRES_DB}\" OWNER \"${POSTGRES_USER}\"" \
      | postgres --single -D "${PGDATA}" postgres >/dev/null
  fi
  echo "postgres-start: initialised pgdata=${PGDATA} user=${POSTGRES_USER} db=${POSTGRES_DB}"
fi
exec postgres -D "${PGDATA}" -c listen_addresses='*' -c unix_socket_directories=/tmp \
  -c max_prepared_transactions="${POSTGRES_MAX_PREPARED_TRANSACTIONS}" "$@"
EOF
}

# The demo's PostgreSQL: Debian's postgresql package on the debootstrap base (no registry),
# run as the non-root uid ${POSTGRES_UID}; configured by POSTGRES_USER, POSTGRES_PASSWORD and
# POSTGRES_DB like the familiar image. Cached by the hash of the base image and this code.
build_postgres() {
  local inputs name script
  debootstrap_image "${BASE_IMAGE}" "ca-certificates,tzdata"
  inputs="$(printf '%s\n%s\n%s' "$(image_id "${BASE_IMAGE}")" \
    "$(declare -f build_postgres)" "$(declare -f postgres_start_script)" \
    | sha256sum | cut -d' ' -f1)"
  if image_fresh "${POSTGRES_IMAGE}" "${inputs}"; then
    log "Image up to date image=${POSTGRES_IMAGE}"
    return 0
  fi
  log "Building image=${POSTGRES_IMAGE}"
  script="$(mktemp)"
  postgres_start_script >"${script}"
  name="sj-image-build-postgres-$$"
  docker rm -f "${name}" >/dev/null 2>&1 || true
  if ! docker run --name "${name}" --network host -v "${script}:/postgres-start:ro" \
      "${BASE_IMAGE}" bash -euxc "
        export DEBIAN_FRONTEND=noninteractive
        groupadd --system --gid ${POSTGRES_UID} postgres
        useradd --system --uid ${POSTGRES_UID} --gid ${POSTGRES_UID} \
          --home-dir /var/lib/postgresql --shell /bin/bash postgres
        # The image initialises its own data directory on first start.
        mkdir -p /etc/postgresql-common/createcluster.d
        echo 'create_main_cluster = false' \
          >/etc/postgresql-common/createcluster.d/no-main-cluster.conf
        apt-get update -q
        apt-get install -y -q --no-install-recommends postgresql
        apt-get clean
        rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log
        ln -s /usr/lib/postgresql/\$(ls /usr/lib/postgresql | sort -V | tail -1) /opt/postgresql
        install -m 0755 /postgres-start /usr/local/bin/postgres-start
        mkdir -p /var/lib/postgresql/data
        chown -R ${POSTGRES_UID}:${POSTGRES_UID} /var/lib/postgresql
        /opt/postgresql/bin/postgres --version
      " >"${script}.log" 2>&1; then
    cat "${script}.log" >&2
    rm -f "${script}" "${script}.log"
    docker rm -f "${name}" >/dev/null 2>&1 || true
    die "Build step failed image=${POSTGRES_IMAGE}"
  fi
  rm -f "${script}" "${script}.log"
  docker commit -c "LABEL snapshotjob.inputs=${inputs}" \
    -c "USER ${POSTGRES_UID}:${POSTGRES_UID}" -c 'EXPOSE 5432' \
    -c 'ENV PGDATA=/var/lib/postgresql/data/pgdata LANG=C.UTF-8' \
    -c 'CMD ["/usr/local/bin/postgres-start"]' "${name}" "${POSTGRES_IMAGE}" >/dev/null
  docker rm -f "${name}" >/dev/null
  log "Built image=${POSTGRES_IMAGE}"
}

# ---------------------------------------------------------------------------------------------
# The split images: one plain multi-stage Dockerfile each (operator.Dockerfile,
# spark-runtime.Dockerfile, member.Dockerfile and the test-only test-kafka-broker.Dockerfile,
# test-s3proxy.Dockerfile), built with `docker build` from BASE_IMAGE (this machine's
# debootstrap base: no registry serves python:3.11-slim-bookworm or debian:bookworm-slim here).
# Their names are in images.env. Each build context is staged under ${CONTEXT_ROOT}/<target>
# (hard links into this cache where it can), and each image is cached by its inputs' hash, so
# a warm run sends nothing to Docker. After a build: its size, and its SBOM (syft, SPDX JSON) in
# ${SBOM_DIR}.
CONTEXT_ROOT="${SJ_CACHE}/image-contexts"
SBOM_DIR="${SBOM_DIR:-${REPO_ROOT}/dist/sbom}"
SYFT_VERSION="${SYFT_VERSION:-v1.57.2}"
SYFT="${SJ_CACHE}/syft/${SYFT_VERSION}/bin/syft"
SPLIT_TARGETS=(operator spark-runtime member test-kafka-broker test-s3proxy)

# The OCI labels' values: the product version (snapshotjob_contract/version.py, the one place
# hack/versioning.py reads it from), the commit, and where the source lives.
image_version() {
  sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${REPO_ROOT}/snapshotjob_contract/version.py"
}
image_revision() { git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null || echo unknown; }
image_source() {
  echo "${SJ_IMAGE_SOURCE:-$(git -C "${REPO_ROOT}" remote get-url origin 2>/dev/null || echo unknown)}"
}

# split_image TARGET : the image name images.env gives TARGET.
split_image() {
  case "$1" in
    operator) echo "${OPERATOR_IMAGE}" ;;
    spark-runtime) echo "${SPARK_RUNTIME_IMAGE}" ;;
    member) echo "${MEMBER_IMAGE}" ;;
    test-kafka-broker) echo "${KAFKA_BROKER_IMAGE}" ;;
    test-s3proxy) echo "${S3PROXY_IMAGE}" ;;
    *) die "Unknown split image target=$1" ;;
  esac
}

# link_into SRC... DEST_DIR : hard links (same filesystem) or copies.
link_into() {
  local dest="${*: -1}"
  mkdir -p "${dest}"
  cp -rl "${@:1:$#-1}" "${dest}/" 2>/dev/null || cp -r "${@:1:$#-1}" "${dest}/"
}

# This project's wheel, built once per run into ${CONTEXT_ROOT}/project.
PROJECT_WHEEL_DIR=""
project_wheel() {
  if [[ -z "${PROJECT_WHEEL_DIR}" ]]; then
    PROJECT_WHEEL_DIR="${CONTEXT_ROOT}/project"
    rm -rf "${PROJECT_WHEEL_DIR}" "${REPO_ROOT}/build/lib"
    mkdir -p "${PROJECT_WHEEL_DIR}"
    "${VENV_PY}" -m pip wheel --quiet --no-deps --no-build-isolation \
      --wheel-dir "${PROJECT_WHEEL_DIR}" "${REPO_ROOT}" >&2 || die "pip wheel of the project failed"
  fi
  echo "${PROJECT_WHEEL_DIR}"
}

# stage_context TARGET DIR : fills DIR with TARGET's build context (see each Dockerfile's top).
stage_context() {
  local target="$1" ctx="$2" deps
  rm -rf "${ctx}"
  mkdir -p "${ctx}/bin"
  case "${target}" in
    operator | spark-runtime)
      if [[ "${target}" == operator ]]; then deps="$(wheelhouse operator)"; else deps="$(wheelhouse runtime)"; fi
      link_into "${deps}"/wheels/*.whl "${ctx}/deps"
      cp "${deps}/constraints.txt" "${ctx}/deps/constraints.txt"
      link_into "$(project_wheel)"/*.whl "${ctx}/project"
      ;;&
    spark-runtime)
      mkdir -p "${ctx}/cds/spark_runtime" "${ctx}/jars"
      (cd "${REPO_ROOT}" && cp "${CDS_SOURCES[@]}" "${ctx}/cds/spark_runtime/")
      link_into "${SPARK_KAFKA_DIR}" "${DELTA_DIR}" "${S3A_DIR}" "${CHUNKS_DIR}" "${ctx}/jars"
      # Their .complete markers stay: spark_runtime/session.py loads a folder's jars only
      # when it has one (a half-fetched folder would fail the session's start).
      cp "${IMAGES_DIR}/executor" "${ctx}/bin/"
      ;;
    member)
      link_into "${HAZELCAST_JAR}" "${ctx}/jars"
      mv "${ctx}/jars/${HAZELCAST_JAR##*/}" "${ctx}/jars/hazelcast.jar"
      cp "${IMAGES_DIR}/hazelcast-member" "${ctx}/bin/"
      ;;
    test-kafka-broker)
      mkdir -p "${ctx}/kafka"
      link_into "${KAFKA_LIBS}" "${ctx}/kafka"
      rm -f "${ctx}/kafka/libs/.complete"
      cp "${IMAGES_DIR}/kafka-broker" "${ctx}/bin/"
      ;;
    test-s3proxy)
      link_into "${S3PROXY_JAR}" "${ctx}"
      mv "${ctx}/${S3PROXY_JAR##*/}" "${ctx}/s3proxy.jar"
      cp "${IMAGES_DIR}/s3-server" "${ctx}/bin/"
      ;;
  esac
  cp "${IMAGES_DIR}/${target}.Dockerfile" "${ctx}/Dockerfile"
}

# context_hash DIR : one hash over every file's path and content in a staged context, with the
# project's wheel (new bytes on every `pip wheel`: its zip timestamps) replaced by the files it
# is built from.
context_hash() {
  {
    (cd "$1" && find . -type f -not -path './project/*' | LC_ALL=C sort | xargs sha256sum)
    if [[ -d "$1/project" ]]; then
      (cd "${REPO_ROOT}" && find snapshotjob_contract snapshot_protocol snapshot_store \
        operator/snapshot_operator spark_runtime -type f -not -path '*/__pycache__/*' \
        -not -name '*.pyc' | LC_ALL=C sort | xargs sha256sum)
      sha256sum "${REPO_ROOT}/pyproject.toml"
    fi
  } | sha256sum | cut -d' ' -f1
}

# The syft binary, built from the Go module proxy once (like hack/kube/build.sh's binaries).
ensure_syft() {
  [[ -x "${SYFT}" ]] && return 0
  command -v go >/dev/null || die "No go to build syft ${SYFT_VERSION}: install Go, or set SBOM=0"
  log "Building syft version=${SYFT_VERSION}"
  GOBIN="$(dirname "${SYFT}")" GOFLAGS=-mod=mod go install \
    "github.com/anchore/syft/cmd/syft@${SYFT_VERSION}" >&2 || die "go install of syft failed"
}

# write_sbom TARGET IMAGE : ${SBOM_DIR}/TARGET.spdx.json for IMAGE's current ID (kept while the
# image is the same).
write_sbom() {
  local target="$1" image="$2" id out
  [[ "${SBOM:-1}" == 1 ]] || return 0
  ensure_syft
  id="$(image_id "${image}")"
  out="${SBOM_DIR}/${target}.spdx.json"
  mkdir -p "${SBOM_DIR}"
  if [[ -f "${out}" && "$(cat "${out%.json}.image-id" 2>/dev/null)" == "${id}" ]]; then
    log "SBOM up to date image=${image} sbom=${out}"
    return 0
  fi
  SYFT_CHECK_FOR_APP_UPDATE=false "${SYFT}" scan --quiet "docker:${image}" \
    -o "spdx-json=${out}.tmp" >&2 || die "syft failed image=${image}"
  mv "${out}.tmp" "${out}"
  echo "${id}" >"${out%.json}.image-id"
  log "SBOM written image=${image} sbom=${out}"
}

# print_size IMAGE : the image's size as Docker reports it (docs/development/e2e.md).
print_size() {
  local bytes
  bytes="$(docker image inspect --format '{{.Size}}' "$1")"
  log "Image size image=$1 bytes=${bytes} mb=$(( bytes / 1000000 ))"
}

# build_split TARGET : builds TARGET's image from its Dockerfile (cached by the hash of its
# staged context, the base image, the labels' values and this code).
build_split() {
  local target="$1" image ctx inputs
  image="$(split_image "${target}")"
  case "${target}" in
    spark-runtime)
      [[ -f "${SPARK_KAFKA_DIR}/.complete" && -f "${DELTA_DIR}/.complete" \
        && -f "${S3A_DIR}/.complete" && -f "${CHUNKS_DIR}/.complete" ]] \
        || die "Spark's Kafka connector, Delta Lake, s3a or the chunk jars missing: run 'make install'" ;;
    member) [[ -f "${HAZELCAST_JAR}" ]] || die "Hazelcast jar missing jar=${HAZELCAST_JAR}: run 'make install'" ;;
    test-kafka-broker) [[ -f "${KAFKA_LIBS}/.complete" ]] || die "Kafka jars missing: run 'make install'" ;;
    test-s3proxy) [[ -f "${S3PROXY_JAR}" ]] || die "s3proxy jar missing: run 'make install'" ;;
  esac
  debootstrap_image "${BASE_IMAGE}" "ca-certificates,tzdata"
  ctx="${CONTEXT_ROOT}/${target}"
  stage_context "${target}" "${ctx}"
  inputs="$(printf '%s\n' "$(context_hash "${ctx}")" "$(image_id "${BASE_IMAGE}")" \
    "$(image_version)" "$(image_revision)" "$(image_source)" "$(declare -f build_split)" \
    | sha256sum | cut -d' ' -f1)"
  if image_fresh "${image}" "${inputs}"; then
    log "Image up to date image=${image}"
  else
    log "Building image=${image} dockerfile=hack/images/${target}.Dockerfile base=${BASE_IMAGE}"
    docker_build "${image}" "${ctx}" --network host --target "${target}" \
      --build-arg "BASE_IMAGE=${BASE_IMAGE}" --build-arg "JVM_BASE_IMAGE=${BASE_IMAGE}" \
      --build-arg "VERSION=$(image_version)" --build-arg "REVISION=$(image_revision)" \
      --build-arg "SOURCE=$(image_source)" --label "snapshotjob.inputs=${inputs}"
    log "Built image=${image}"
  fi
  rm -rf "${ctx}"
  print_size "${image}"
  write_sbom "${target}" "${image}"
}

main() {
  local targets=("$@") t start
  [[ ${#targets[@]} -gt 0 ]] || targets=(app)
  start=$(date +%s)
  # One build at a time on this machine: the cluster tier's preparation (hack/e2e-prepare.sh)
  # runs beside the integration tier's image test, and both stage the same build contexts.
  mkdir -p "${SJ_CACHE}"
  exec 9>"${SJ_CACHE}/image-build.lock"
  if ! flock --nonblock 9; then
    log "Waiting for another image build lock=${SJ_CACHE}/image-build.lock"
    flock 9
  fi
  ensure_docker
  for t in "${targets[@]}"; do
    case "${t}" in
      # The product images and the examples' job image, without SBOMs (`split` writes them).
      app)
        for t in operator spark-runtime member; do SBOM=0 timed "${t}" build_split "${t}"; done
        timed examples build_examples ;;
      examples) timed examples build_examples ;;
      e2e) timed e2e build_e2e ;;
      postgres) timed postgres build_postgres ;;
      custom) timed custom build_custom ;;
      operator | spark-runtime | member | test-kafka-broker | test-s3proxy)
        timed "${t}" build_split "${t}" ;;
      split) for t in "${SPLIT_TARGETS[@]}"; do timed "${t}" build_split "${t}"; done ;;
      *) die "Unknown target=${t}" ;;
    esac
  done
  log "Images ready targets='${targets[*]}' seconds=$(( $(date +%s) - start ))"
}

main "$@"
