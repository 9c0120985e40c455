# The examples' job image: the Spark runtime plus this repository's examples/ (the pipelines of
# `make demo`, examples/kubernetes/snapshotjob.yaml and the docs), importable as `examples.*`.
# A job image of your own is built the same way (examples/custom-image/Dockerfile).
#
# Build context (hack/images/build.sh stages it): app/examples/, a copy of examples/.
ARG RUNTIME_IMAGE=snapshotjob/spark-runtime:dev
FROM ${RUNTIME_IMAGE}
COPY app/ /opt/snapshotjob/app/
ENV PYTHONPATH=/opt/snapshotjob/app
