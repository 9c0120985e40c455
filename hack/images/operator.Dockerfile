# The operator's image: Python, the operator's dependencies (the `operator` extra) and this
# project's package. No JVM and no Spark.
#
# Build context (hack/images/build.sh stages it; docs/development/e2e.md):
#   deps/        the third-party wheels of .[operator] and constraints.txt (requirements.lock)
#   project/     this project's wheel (snapshotjob-*.whl)
# Base: any Debian bookworm image; Python 3.11 comes from Debian's packages when the base has
# none (the test bed's debootstrap base), else the base's own (python:3.11-slim-bookworm).
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

# The virtualenv, built here so that the wheels never reach the final image's layers.
FROM python AS venv
COPY deps/ /tmp/deps/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --quiet --no-cache-dir --no-index --find-links /tmp/deps \
      --constraint /tmp/deps/constraints.txt /tmp/deps/*.whl
COPY project/ /tmp/project/
RUN /opt/venv/bin/pip install --quiet --no-cache-dir --no-deps --no-index /tmp/project/*.whl \
    && /opt/venv/bin/pip uninstall --quiet --yes pip setuptools \
    && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib >/dev/null

FROM python AS operator
ARG APP_UID=10001
COPY --from=venv /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/app \
    LANG=C.UTF-8
WORKDIR /home/app
USER ${APP_UID}:${APP_UID}
# Last: the version and revision change no layer but the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="snapshotjob-operator" \
      org.opencontainers.image.description="The SnapshotJob operator (no JVM, no Spark)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["python", "-m", "snapshot_operator", "--help"]
