#!/usr/bin/env bash
# Sets up everything `make test` and `make demo` need on a fresh Debian 12 machine.
#
# Idempotent: each step checks first and does nothing when its result is already there,
# so `make test` can depend on it without paying for it twice. Everything that is not
# Python lives outside the repository (Debian packages, ~/.cache/snapshotjob) so a clean
# clone reuses it.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$REPO/.venv}
PYTHON=${PYTHON:-python3.11}
CACHE=${SJ_CACHE:-$HOME/.cache/snapshotjob}
# SPARK_VERSION and HAZELCAST_VERSION, written in this one file (tests/unit/test_versions.py
# checks that pyproject.toml, requirements.lock and jvm/pom.xml agree with it).
# shellcheck source=hack/versions.env
source "$REPO/hack/versions.env"
LOCK=$REPO/requirements.lock
HAZELCAST_JAR=$CACHE/jars/hazelcast-$HAZELCAST_VERSION.jar

step() { printf '==> %s\n' "$*"; }
fail() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

apt_updated=0
apt_install() {
    if [ "$(id -u)" != 0 ]; then
        fail "Debian packages missing: $*; run 'sudo apt-get install -y $*' or run make install as root"
    fi
    if [ $apt_updated = 0 ]; then
        step "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || fail "apt-get update failed"
        apt_updated=1
    fi
    step "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || fail "apt-get install $* failed"
}

# --- Python 3.11 and the virtualenv ------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || fail "Python 3.11 is required, found $("$PYTHON" --version 2>&1) at $(command -v "$PYTHON")"

if [ ! -x "$VENV/bin/python" ]; then
    step "Creating virtualenv at $VENV"
    "$PYTHON" -m venv "$VENV" || fail "could not create $VENV (is python3.11-venv installed?)"
fi
stamp=$VENV/.snapshotjob-installed
want=$(cat "$REPO/pyproject.toml" "$LOCK" | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # Every third-party package at the version requirements.lock pins (hack/lock.sh writes it),
    # so this machine, CI and the images run the same ones.
    step "Installing Python dependencies into $VENV (pip install -c requirements.lock -e '.[dev]')"
    log=$VENV/pip-install.log
    { "$VENV/bin/pip" install --upgrade pip setuptools wheel \
        && "$VENV/bin/pip" install --no-compile -c "$LOCK" -e "$REPO[dev]"; } >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; fail "pip install failed; full log in $log"; }
    echo "$want" > "$stamp"
    installed=1
else
    step "Python dependencies are up to date in $VENV"
fi
pyspark_version=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("pyspark"))')
[ "$pyspark_version" = "$SPARK_VERSION" ] \
    || fail "PySpark $pyspark_version in $VENV, but SPARK_VERSION is $SPARK_VERSION (hack/versions.env): run hack/lock.sh"
step "PySpark $pyspark_version"

# The installed packages must be byte-compiled: every driver, Python worker and test process
# imports PySpark, pandas and pyarrow, and where PYTHONDONTWRITEBYTECODE is set (this
# machine's environment sets it) what Python compiles at import is never cached, so an
# uncompiled venv compiles them again in every process: 5.5 s of CPU for those imports
# instead of 2.1 (measured beside a test run), and the chaos test's driver restarts 2 s apart
# instead of 5. compileall on both cores instead of pip's one-by-one compile; a venv
# installed uncompiled earlier is compiled here once, and after every pip install (what was
# compiled before is only checked). tests/unit/test_bytecode.py checks it.
read -r site_packages cache_tag < <("$VENV/bin/python" -c \
    'import sys, sysconfig; print(sysconfig.get_paths()["purelib"], sys.implementation.cache_tag)')
if [ -n "${installed:-}" ] || [ ! -f "$site_packages/pyspark/__pycache__/__init__.$cache_tag.pyc" ]; then
    step "Byte-compiling the packages in $site_packages"
    "$VENV/bin/python" -m compileall -q -j 0 "$site_packages" >"$VENV/compileall.log" 2>&1 \
        || echo "WARNING: some files did not compile (they compile at import instead); see $VENV/compileall.log" >&2
fi

# --- Java 17 and Maven ---------------------------------------------------------------------
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
    apt_install openjdk-17-jre-headless
fi
step "Java $(java_major) at $(command -v java)"
command -v mvn >/dev/null 2>&1 || apt_install maven

# --- The Hazelcast member jar, from Maven Central --------------------------------------------
if [ ! -s "$HAZELCAST_JAR" ]; then
    step "Fetching com.hazelcast:hazelcast:$HAZELCAST_VERSION into $CACHE/jars"
    mkdir -p "$CACHE/jars"
    (cd "$CACHE" && mvn -q -B dependency:copy \
        "-Dartifact=com.hazelcast:hazelcast:$HAZELCAST_VERSION:jar" \
        "-DoutputDirectory=$CACHE/jars") || fail "Maven could not fetch the Hazelcast jar"
fi
step "Hazelcast $HAZELCAST_VERSION at $HAZELCAST_JAR"

# The PostgreSQL JDBC driver, for Spark's JDBC source (the runtime puts it on the classpath).
POSTGRES_JDBC_VERSION=${POSTGRES_JDBC_VERSION:-42.7.4}
if [ ! -s "$CACHE/jars/postgresql-$POSTGRES_JDBC_VERSION.jar" ]; then
    step "Fetching org.postgresql:postgresql:$POSTGRES_JDBC_VERSION into $CACHE/jars"
    (cd "$CACHE" && mvn -q -B dependency:copy \
        "-Dartifact=org.postgresql:postgresql:$POSTGRES_JDBC_VERSION:jar" \
        "-DoutputDirectory=$CACHE/jars") || fail "Maven could not fetch the PostgreSQL JDBC driver"
fi
step "PostgreSQL JDBC driver $POSTGRES_JDBC_VERSION in $CACHE/jars"

# fetch_maven_deps DIR WHAT MVN_ARGS... < DEPENDENCIES: resolve the <dependency> elements read
# from stdin with Maven from a throwaway POM and copy their runtime jars into DIR; a stamp
# file marks a complete download, so an interrupted one is fetched again.
fetch_maven_deps() {
    local dir=$1 what=$2 pom_dir
    shift 2
    [ -f "$dir/.complete" ] && return 0
    step "Fetching $what into $dir"
    pom_dir=$(mktemp -d)
    {
        echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        echo '<groupId>io.snapshotjob</groupId><artifactId>fetch</artifactId><version>1</version>'
        echo '<packaging>pom</packaging><dependencies>'
        cat
        echo '</dependencies></project>'
    } >"$pom_dir/pom.xml"
    rm -rf "$dir"
    (cd "$pom_dir" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
        "-DoutputDirectory=$dir" "$@") || fail "Maven could not fetch $what"
    rm -rf "$pom_dir"
    touch "$dir/.complete"
}

# Spark's own Kafka connector, for the runtime's KafkaSource: the connector and the three jars
# it needs that PySpark does not ship, at PySpark's own version.
SPARK_KAFKA_VERSION=$SPARK_VERSION
SPARK_KAFKA_DIR=$CACHE/jars/spark-kafka-$SPARK_KAFKA_VERSION
fetch_maven_deps "$SPARK_KAFKA_DIR" "org.apache.spark:spark-sql-kafka-0-10_2.13:$SPARK_KAFKA_VERSION" \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 <<DEPS
<dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>$SPARK_KAFKA_VERSION</version></dependency>
DEPS
step "Spark Kafka connector $SPARK_KAFKA_VERSION in $SPARK_KAFKA_DIR"

# Delta Lake, for the runtime's DeltaSink: its two jars; everything else it needs PySpark ships.
DELTA_DIR=$CACHE/jars/delta-$DELTA_VERSION
fetch_maven_deps "$DELTA_DIR" "io.delta:delta-spark_2.13:$DELTA_VERSION" \
    -DincludeArtifactIds=delta-spark_2.13,delta-storage <<DEPS
<dependency><groupId>io.delta</groupId><artifactId>delta-spark_2.13</artifactId><version>$DELTA_VERSION</version></dependency>
DEPS
step "Delta Lake $DELTA_VERSION in $DELTA_DIR"

# s3a:// for Spark: hadoop-aws and the AWS SDK v2 modules it loads (about 9 MiB), without the
# SDK's bundle (654 MiB), the analytics accelerator and what PySpark ships already (HTTP client,
# netty, logging). spark_runtime/session.py turns off the two defaults that need the
# accelerator (fs.s3a.input.stream.type, fs.s3a.audit.enabled).
S3A_DIR=$CACHE/jars/s3a-$HADOOP_AWS_VERSION
fetch_maven_deps "$S3A_DIR" "org.apache.hadoop:hadoop-aws:$HADOOP_AWS_VERSION with the AWS SDK's modules" <<DEPS
<dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId><version>$HADOOP_AWS_VERSION</version>
<exclusions><exclusion><groupId>software.amazon.awssdk</groupId><artifactId>bundle</artifactId></exclusion>
<exclusion><groupId>software.amazon.s3.analyticsaccelerator</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>org.wildfly.openssl</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
<dependency><groupId>software.amazon.awssdk</groupId><artifactId>s3</artifactId><version>$AWS_SDK_VERSION</version>
<exclusions><exclusion><groupId>org.apache.httpcomponents</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>commons-codec</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>commons-logging</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>io.netty</groupId><artifactId>*</artifactId></exclusion>
<exclusion><groupId>software.amazon.awssdk</groupId><artifactId>netty-nio-client</artifactId></exclusion>
<exclusion><groupId>software.amazon.awssdk</groupId><artifactId>crt-core</artifactId></exclusion>
<exclusion><groupId>software.amazon.awssdk</groupId><artifactId>http-auth-aws-eventstream</artifactId></exclusion>
<exclusion><groupId>software.amazon.eventstream</groupId><artifactId>eventstream</artifactId></exclusion></exclusions></dependency>
<dependency><groupId>software.amazon.awssdk</groupId><artifactId>s3-transfer-manager</artifactId><version>$AWS_SDK_VERSION</version>
<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
DEPS
step "hadoop-aws $HADOOP_AWS_VERSION (s3a) in $S3A_DIR"

# --- The executors' chunk writer and reader (jvm/, spark_runtime/jvm_chunks.py) -----------
# jvm/ is a Maven module (jvm/pom.xml): Spark $SPARK_VERSION and Hazelcast are provided
# dependencies, its JUnit tests run in every build. The first build after the POM changes runs
# online once, which puts every jar and plugin it needs into Maven's local repository
# (~/.m2/repository): `dependency:go-offline` alone misses some (the test provider of surefire,
# a dependency version Spark's POM manages). Every build then runs offline (`mvn -o`). The jar
# goes into one directory with the two jars it needs at run time (the Hazelcast client and
# zero-allocation-hashing's xxh3), which spark_session() puts on every session's classpath and
# the image ships. Rebuilt whenever jvm/ or the Hazelcast jar change: .complete holds the hash
# of what it was built from.
CHUNKS_DIR=$CACHE/jars/snapshotjob-chunks
if ! command -v javac >/dev/null 2>&1; then
    apt_install openjdk-17-jdk-headless
fi
jvm_files() { (cd "$REPO" && find jvm -path jvm/target -prune -o -type f -print | LC_ALL=C sort); }
chunks_inputs=$( { (cd "$REPO" && jvm_files | xargs sha256sum); echo "$HAZELCAST_JAR"; } \
    | sha256sum | cut -d' ' -f1)
if [ "$(cat "$CHUNKS_DIR/.complete" 2>/dev/null)" != "$chunks_inputs" ]; then
    resolved=$CACHE/jars/.snapshotjob-chunks-resolved
    pom_hash=$(sha256sum "$REPO/jvm/pom.xml" | cut -d' ' -f1)
    log=$CACHE/jars/snapshotjob-chunks-build.log
    if [ "$(cat "$resolved" 2>/dev/null)" != "$pom_hash" ]; then
        step "Resolving jvm/'s dependencies and plugins into Maven's local repository (online, once)"
        (cd "$REPO/jvm" && mvn -B -q dependency:go-offline package) >"$log" 2>&1 \
            || { tail -n 40 "$log" >&2; fail "Maven could not resolve or build jvm/; full log in $log"; }
        echo "$pom_hash" >"$resolved"
    fi
    step "Building jvm/ offline and running its JUnit tests into $CHUNKS_DIR (mvn -o package)"
    scratch=$(mktemp -d "$CACHE/jars/.snapshotjob-chunks-XXXXXX")
    { (cd "$REPO/jvm" && mvn -B -q -o package \
        && mvn -B -q -o dependency:copy-dependencies -DincludeScope=runtime \
            "-DoutputDirectory=$scratch/out"); } >"$log" 2>&1 \
        || { rm -rf "$scratch"; tail -n 40 "$log" >&2; fail "mvn -o package failed in jvm/; full log in $log"; }
    cp "$REPO/jvm/target/snapshotjob-chunks.jar" "$HAZELCAST_JAR" "$scratch/out/"
    echo "$chunks_inputs" >"$scratch/out/.complete"
    rm -rf "$CHUNKS_DIR" && mv "$scratch/out" "$CHUNKS_DIR" && rm -rf "$scratch"
fi
step "Chunk writer and reader in $CHUNKS_DIR"

# --- A Kafka broker for the tests: KRaft, from Maven Central's jars (testbed/kafka.py) ------
# The broker's jar and its runtime dependencies, plus a log4j binding for its SLF4J logging.
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
KAFKA_LIBS=$CACHE/kafka/$KAFKA_VERSION/libs
fetch_maven_deps "$KAFKA_LIBS" "org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its dependencies" <<DEPS
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.5</version></dependency>
DEPS
step "Kafka broker $KAFKA_VERSION in $KAFKA_LIBS"

# --- An S3-compatible server: s3proxy, from Maven Central (testbed/s3.py, the s3-server image) -
# One self-contained jar (the jar-with-dependencies classifier) whose filesystem backend keeps
# the objects in a directory. Its version is pinned in testbed/s3proxy.version alone, which
# testbed/s3.py reads too. Copied through a scratch directory so an interrupted copy never
# leaves a partial jar under the final name.
S3PROXY_VERSION=${S3PROXY_VERSION:-$(tr -d '[:space:]' <"$REPO/testbed/s3proxy.version")}
S3PROXY_JAR=$CACHE/jars/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar
if [ ! -s "$S3PROXY_JAR" ]; then
    step "Fetching org.gaul:s3proxy:$S3PROXY_VERSION (jar-with-dependencies) into $CACHE/jars"
    mkdir -p "$CACHE/jars"
    scratch=$(mktemp -d "$CACHE/jars/.s3proxy-XXXXXX")
    (cd "$CACHE" && mvn -q -B dependency:copy \
        "-Dartifact=org.gaul:s3proxy:$S3PROXY_VERSION:jar:jar-with-dependencies" \
        "-DoutputDirectory=$scratch") || { rm -rf "$scratch"; fail "Maven could not fetch s3proxy"; }
    mv "$scratch/$(basename "$S3PROXY_JAR")" "$S3PROXY_JAR"
    rm -rf "$scratch"
fi
step "s3proxy $S3PROXY_VERSION at $S3PROXY_JAR"

# --- Wheels of examples/custom-image's requirements ------------------------------------------
# The end-to-end test builds that example image with --no-index from these: the build
# container cannot be assumed to reach PyPI (on this project's machines it does not trust the
# egress proxy's CA), and a test sends no traffic outside the machine. The folder keeps the
# requirements it was downloaded for (.requirements); hack/images/build.sh custom checks them.
REQUIREMENTS=$REPO/examples/custom-image/requirements.txt
WHEELS=$CACHE/wheels/custom-image
if ! cmp -s "$REQUIREMENTS" "$WHEELS/.requirements"; then
    step "Downloading the wheels of $REQUIREMENTS into $WHEELS"
    mkdir -p "$CACHE/wheels"
    scratch=$(mktemp -d "$CACHE/wheels/.custom-image-XXXXXX")
    "$VENV/bin/pip" download -q --only-binary=:all: --python-version 3.11 -d "$scratch" \
        -r "$REQUIREMENTS" || { rm -rf "$scratch"; fail "pip could not download the example's wheels"; }
    cp "$REQUIREMENTS" "$scratch/.requirements"
    rm -rf "$WHEELS" && mv "$scratch" "$WHEELS"
fi
step "Wheels of the custom-image example in $WHEELS"

# --- The drivers' class data sharing archive (spark_runtime/cds.py) ------------------------
# Every local driver start maps Spark's classes from it instead of loading them: about 4 s
# less per start (bench/driver_start.py). Built once per virtualenv and Java, about 40 s.
archive=$(SJ_CACHE=$CACHE "$VENV/bin/python" -m spark_runtime.cds 2>"$VENV/cds-build.log") \
    || { tail -n 30 "$VENV/cds-build.log" >&2; fail "building the class data sharing archive failed"; }
step "Class data sharing archive at $archive"

# --- PostgreSQL server ---------------------------------------------------------------------
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql
fi
step "PostgreSQL server at $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"

# --- The Kubernetes test bed: Docker engine, debootstrap, tools the cluster scripts use -------
# The binaries themselves are built from the Go module proxy on first use (hack/kube/build.sh);
# flanneld (the cluster's Pod network) links cgo statically, so it needs gcc and libc6-dev.
missing=()
for pkg in docker.io debootstrap busybox-static openssl iptables gcc libc6-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] \
    || fail "Go is required to build the Kubernetes test bed (install Go 1.26+ on PATH: flannel's go.mod asks for it)"
step "Docker engine, debootstrap and Go are present"

step "Install complete"
