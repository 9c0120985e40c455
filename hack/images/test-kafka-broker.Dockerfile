# Test-only: a single-node KRaft Kafka broker (the `kafka-broker` launcher and Kafka's jars)
# for examples/kubernetes/kafka.yaml and the end-to-end tests on kind, where no container
# registry offers one. Not a product image.
#
# Build context (hack/images/build.sh stages it; docs/development/e2e.md):
#   kafka/libs/   bin/kafka-broker
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

FROM jre AS test-kafka-broker
ARG APP_UID=10001
COPY kafka/libs/ /opt/kafka/libs/
COPY bin/kafka-broker /usr/local/bin/kafka-broker
ENV HOME=/home/app LANG=C.UTF-8
WORKDIR /home/app
USER ${APP_UID}:${APP_UID}
# Last: the version and revision change no layer but the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="snapshotjob-test-kafka-broker" \
      org.opencontainers.image.description="Test only: a single-node Kafka broker" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["kafka-broker"]
