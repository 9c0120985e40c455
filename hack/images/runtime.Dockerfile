# The project image: operator, Spark driver (and executors) and Hazelcast member in one.
# Rendered by hack/images/build.sh (@...@ placeholders); the build context is a temporary
# directory holding the project's wheel, examples/, the Hazelcast jar and the launchers.
FROM @DEPS_IMAGE@
COPY snapshotjob-*.whl /tmp/wheel/
RUN /opt/venv/bin/pip install --quiet --no-deps --no-index --no-cache-dir /tmp/wheel/*.whl \
    && rm -rf /tmp/wheel
COPY app/ /opt/snapshotjob/app/
COPY hazelcast.jar /opt/snapshotjob/jars/hazelcast.jar
# Spark's Kafka connector and the executors' chunk writer and reader (jvm/), loaded by every
# driver session (SJ_JARS_DIR).
COPY jars/ /opt/snapshotjob/jars/
COPY hazelcast-member /usr/local/bin/hazelcast-member
# Spark starts executor Pods with the argument `executor` and no command of its own.
COPY executor /usr/local/bin/executor
# A single-node KRaft broker for examples/kubernetes/kafka.yaml and the tests on kind.
COPY kafka/libs/ /opt/kafka/libs/
COPY kafka-broker /usr/local/bin/kafka-broker
# An S3-compatible server for examples/kubernetes/s3proxy.yaml and the tests on kind.
COPY s3proxy.jar /opt/s3proxy/s3proxy.jar
COPY s3-server /usr/local/bin/s3-server
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/snapshotjob/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/app \
    LANG=C.UTF-8 \
    SJ_CDS_DIR=/opt/snapshotjob/cds \
    SJ_JARS_DIR=/opt/snapshotjob/jars
WORKDIR /home/app
USER @UID@:@UID@
LABEL snapshotjob.inputs=@INPUTS@
CMD ["python", "-m", "snapshot_operator", "--help"]
