#!/usr/bin/env bash
# Builds the environment Apache Hudi runs in for the tests (the "peer", tests/hudi_peer/): a
# virtualenv of its own with the pyspark Hudi's bundle was built for, and Hudi's Spark bundle jar,
# fetched once with Maven into a cache folder this project owns. Later runs find both and return at
# once, offline. The product's own pyspark (4.x) has no Hudi bundle, hence the second environment.
#
# Pins, in this one place:
#   Apache Hudi 0.15.0: the last release line that writes table version 6 (our layout); its
#     Spark 3.5 bundle (hudi-spark3.5-bundle_2.12) holds the writer, readers, table services and
#     the async indexer's write-client calls.
#   pyspark 3.5.1: the Spark version Hudi 0.15.0 is built against (3.5.2+ changed APIs it uses).
#   hudi-aws 0.15.0 with its DynamoDB lock client and AWS SDK (scripts/hudi-peer/aws-lock.pom.xml):
#     Hudi's DynamoDBBasedLockProvider, which the bundle does not hold.
#
# Writes $VENV/hudi-peer.json (python, jars, java_home, versions) last, so a half-built environment
# is never taken for a built one. Environment: HUDI_PEER_VENV, HUDI_PEER_JARS_DIR (absolute, or
# relative to the project's folder), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

HUDI_VERSION=0.15.0
PYSPARK_VERSION=3.5.1
BUNDLE_ARTIFACT=hudi-spark3.5-bundle_2.12
VENV=${HUDI_PEER_VENV:-.venv-hudi}
JARS_DIR=${HUDI_PEER_JARS_DIR:-.cache/hudi-jars}
PYTHON=${PYTHON:-python3}
MANIFEST="$VENV/hudi-peer.json"
BUNDLE_JAR="$JARS_DIR/$BUNDLE_ARTIFACT-$HUDI_VERSION.jar"
AWS_POM=scripts/hudi-peer/aws-lock.pom.xml
AWS_DIR="$JARS_DIR/aws-lock"
pom_sum=$(cksum <"$AWS_POM" | cut -d' ' -f1)
want="hudi $HUDI_VERSION pyspark $PYSPARK_VERSION aws-lock $pom_sum"

if [ -f "$MANIFEST" ] && [ -f "$BUNDLE_JAR" ] && grep -q "\"pins\": \"$want\"" "$MANIFEST"; then
  exit 0
fi

started=$(date +%s)
echo "building the Apache Hudi peer environment ($want) in $VENV and $JARS_DIR"
echo "  (first run only: downloads pyspark $PYSPARK_VERSION, about 320 MB, and Hudi's bundle, about 105 MB)"
rm -f "$MANIFEST"

# Spark 3.5 runs on Java 8, 11 and 17. Prefer a JDK 17 when the default java is another one.
java_home=${HUDI_PEER_JAVA_HOME:-}
if [ -z "$java_home" ]; then
  for candidate in /usr/lib/jvm/java-17-openjdk-* /usr/lib/jvm/temurin-17-*; do
    [ -x "$candidate/bin/java" ] && { java_home=$candidate; break; }
  done
fi
if [ -z "$java_home" ] && command -v java >/dev/null 2>&1; then
  java_home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
fi
[ -n "$java_home" ] || { echo "no Java runtime found for Spark 3.5 (install openjdk-17)" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q "pyspark==$PYSPARK_VERSION"

if [ ! -f "$BUNDLE_JAR" ]; then
  command -v mvn >/dev/null 2>&1 || { echo "Maven (mvn) is needed to fetch Hudi's bundle: apt-get install maven" >&2; exit 1; }
  mkdir -p "$JARS_DIR"
  if ! mvn -B -Dstyle.color=never --strict-checksums dependency:copy \
    "-Dartifact=org.apache.hudi:$BUNDLE_ARTIFACT:$HUDI_VERSION" "-DoutputDirectory=$JARS_DIR" \
    >"$JARS_DIR/maven.log" 2>&1; then
    tail -n 30 "$JARS_DIR/maven.log" >&2
    echo "Maven could not fetch org.apache.hudi:$BUNDLE_ARTIFACT:$HUDI_VERSION (log: $JARS_DIR/maven.log)" >&2
    exit 1
  fi
fi
[ -s "$BUNDLE_JAR" ] || { echo "Maven did not produce $BUNDLE_JAR" >&2; exit 1; }

# the manifest names absolute paths: a relative one is the project's (this script's parent)
absolute() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$(pwd)" "$1" ;; esac; }

if [ "$(cat "$AWS_DIR/.pom-cksum" 2>/dev/null)" != "$pom_sum" ]; then
  rm -rf "$AWS_DIR"
  if ! mvn -B -Dstyle.color=never --strict-checksums -f "$AWS_POM" dependency:copy-dependencies \
    "-DoutputDirectory=$(absolute "$AWS_DIR")" >"$JARS_DIR/maven-aws.log" 2>&1; then
    tail -n 30 "$JARS_DIR/maven-aws.log" >&2
    echo "Maven could not fetch Hudi's DynamoDB lock provider ($AWS_POM; log: $JARS_DIR/maven-aws.log)" >&2
    exit 1
  fi
  echo "$pom_sum" >"$AWS_DIR/.pom-cksum"
fi

jars="\"$(absolute "$BUNDLE_JAR")\""
for jar in "$AWS_DIR"/*.jar; do jars="$jars, \"$(absolute "$jar")\""; done
cat >"$MANIFEST.tmp" <<JSON
{"pins": "$want", "hudi": "$HUDI_VERSION", "pyspark": "$PYSPARK_VERSION",
 "python": "$(absolute "$VENV")/bin/python", "jars": [$jars], "java_home": "$java_home"}
JSON
mv "$MANIFEST.tmp" "$MANIFEST"
echo "Apache Hudi peer environment ready in $(( $(date +%s) - started )) s ($(du -sh "$VENV" | cut -f1) venv, $(du -sh "$JARS_DIR" | cut -f1) jars)"
