# The snapshot store's members: Java 17, the Hazelcast jar (open source, the version of
# hack/versions.env) and the `hazelcast-member` launcher, which the chart's hazelcast.command
# runs; the chart's ConfigMap gives the project's member configuration (-Dhazelcast.config in
# JAVA_OPTS). The official hazelcast/hazelcast image works too (hazelcast.command: null).
#
# Build context (hack/images/build.sh stages it; docs/development/e2e.md):
#   jars/hazelcast.jar   bin/hazelcast-member
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

FROM jre AS member
ARG APP_UID=10001
COPY jars/hazelcast.jar /opt/snapshotjob/jars/hazelcast.jar
COPY bin/hazelcast-member /usr/local/bin/hazelcast-member
ENV HOME=/home/app LANG=C.UTF-8
WORKDIR /home/app
USER ${APP_UID}:${APP_UID}
# Last: the version and revision change no layer but the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="snapshotjob-member" \
      org.opencontainers.image.description="SnapshotJob's snapshot store member (Hazelcast open source)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["hazelcast-member"]
