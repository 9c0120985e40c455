# The Spark drivers' and executors' image: Java 17, PySpark and the runtime's dependencies (the
# `runtime` extra), this project's package, Spark's Kafka connector, the executors' chunk
# writer and reader (jvm/) and the drivers' class data sharing archive (spark_runtime/cds.py).
# No test servers, no examples: a job's own image starts FROM this one
# (examples/custom-image).
#
# Build context (hack/images/build.sh stages it; docs/development/e2e.md):
#   deps/        the third-party wheels of .[runtime] and constraints.txt (requirements.lock)
#   project/     this project's wheel (snapshotjob-*.whl)
#   cds/         spark_runtime/{__init__,cds,session}.py, which build the CDS archive
#   jars/        spark-kafka-<version>/ and snapshotjob-chunks/ (hack/install.sh fetches them)
#   bin/         the `executor` launcher
# Base: any Debian bookworm image; Python 3.11 from Debian's packages when the base has none.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS python
ARG APP_UID=10001
RUN set -eux; \
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
      export DEBIAN_FRONTEND=noninteractive; \
      apt-get update -q; \
      apt-get install -y -q --no-install-recommends python3 python3-venv; \
      apt-get clean; \
      rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log; \
    fi; \
    groupadd --gid "${APP_UID}" app; \
    useradd --uid "${APP_UID}" --gid "${APP_UID}" --home-dir /home/app --create-home \
      --shell /usr/sbin/nologin app

# The third-party packages, built here so that the wheels (PySpark's is 450 MB) never reach
# the final image's layers.
FROM python AS venv
COPY deps/ /tmp/deps/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --quiet --no-cache-dir --no-index --find-links /tmp/deps \
      --constraint /tmp/deps/constraints.txt /tmp/deps/*.whl \
    && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
    && { /opt/venv/bin/python -m compileall -q /opt/venv/lib >/dev/null || true; }

FROM python AS spark-runtime
ARG APP_UID=10001
# Java 17 (Spark's JVM); procps because Spark's scripts call ps.
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    mkdir -p /usr/share/man/man1; \
    apt-get update -q; \
    apt-get install -y -q --no-install-recommends openjdk-17-jre-headless procps; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log; \
    java -version
COPY --from=venv /opt/venv /opt/venv
# The archive depends only on Java and PySpark: this layer stays cached while they do.
COPY cds/ /tmp/cds-src/
RUN SJ_CDS_DIR=/opt/snapshotjob/cds PYTHONPATH=/tmp/cds-src PYTHONDONTWRITEBYTECODE=1 \
      /opt/venv/bin/python -m spark_runtime.cds \
    && rm -rf /tmp/cds-src /tmp/* /root/.cache
COPY project/ /tmp/project/
RUN /opt/venv/bin/pip install --quiet --no-cache-dir --no-deps --no-index /tmp/project/*.whl \
    && rm -rf /tmp/project /root/.cache
# Spark's Kafka connector and the executors' chunk writer and reader (jvm/), loaded by every
# driver session (SJ_JARS_DIR).
COPY jars/ /opt/snapshotjob/jars/
# Spark starts executor Pods with the argument `executor` and no command of its own.
COPY bin/executor /usr/local/bin/executor
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/app \
    LANG=C.UTF-8 \
    SJ_CDS_DIR=/opt/snapshotjob/cds \
    SJ_JARS_DIR=/opt/snapshotjob/jars
WORKDIR /home/app
USER ${APP_UID}:${APP_UID}
# Last: the version and revision change no layer but the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="snapshotjob-spark-runtime" \
      org.opencontainers.image.description="SnapshotJob's Spark drivers and executors" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["python", "-c", "import pyspark, spark_runtime; print(pyspark.__version__)"]
