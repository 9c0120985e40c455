# Test-only: s3proxy (an S3-compatible server; the `s3-server` launcher and s3proxy's jar) for
# examples/kubernetes/s3proxy.yaml and the end-to-end tests on kind, where no container
# registry offers one. Not a product image.
#
# Build context (hack/images/build.sh stages it; docs/development/e2e.md):
#   s3proxy.jar   bin/s3-server
ARG JVM_BASE_IMAGE=debian:bookworm-slim

# Java 17 on the base (the same instructions in member, test-kafka-broker and test-s3proxy
# .Dockerfile: Docker builds the layer once for the three).
FROM ${JVM_BASE_IMAGE} AS jre
ARG APP_UID=10001
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    mkdir -p /usr/share/man/man1; \
    apt-get update -q; \
    apt-get install -y -q --no-install-recommends openjdk-17-jre-headless; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log; \
    groupadd --gid "${APP_UID}" app; \
    useradd --uid "${APP_UID}" --gid "${APP_UID}" --home-dir /home/app --create-home \
      --shell /usr/sbin/nologin app; \
    java -version

FROM jre AS test-s3proxy
ARG APP_UID=10001
COPY s3proxy.jar /opt/s3proxy/s3proxy.jar
COPY bin/s3-server /usr/local/bin/s3-server
ENV HOME=/home/app LANG=C.UTF-8
WORKDIR /home/app
USER ${APP_UID}:${APP_UID}
# Last: the version and revision change no layer but the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="snapshotjob-test-s3proxy" \
      org.opencontainers.image.description="Test only: an S3-compatible server (s3proxy)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["s3-server"]
