#!/usr/bin/env bash
# OpenJDK ForkJoin + ParallelGC workload: `java Bench.java` (single-file source launch, JDK 11+).
# JAVA (default: java on PATH), JAVA_OPTS (default: -XX:+UseParallelGC -Xms256m -Xmx256m).
# --check: exit 0 when a JDK 11+ is there, else print a skip line and exit 3.
here=$(cd "$(dirname "$0")" && pwd)
java=${JAVA:-java}
ver=$("$java" -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p')
if [ -z "$ver" ] || [ "$ver" -lt 11 ] 2>/dev/null; then
    echo "skip: OpenJDK: no java 11+ (${java}: ${ver:-not found})"
    exit 3
fi
[ "${1:-}" = --check ] && { echo "ok: OpenJDK $ver"; exit 0; }
# shellcheck disable=SC2086
exec "$java" ${JAVA_OPTS:--XX:+UseParallelGC -Xms256m -Xmx256m} "$here/Bench.java"
