#!/usr/bin/env bash
# The Java client's conformance driver (clients/java/conformance/ConformanceDriver.java);
# needs a JDK 17+ and Maven (JUnit comes from Maven Central for the library's tests).
set -euo pipefail
pkg=$(cd "$(dirname "$0")/../../java" && pwd)
cases=$(cd "$(dirname "$0")/.." && pwd)/cases.json
command -v javac >/dev/null && command -v mvn >/dev/null || { echo "a JDK and Maven are not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$pkg"
  mvn -q -B -DskipTests package
  rm -rf target/conformance
  exec javac -Xlint:all -Werror -d target/conformance -cp target/classes conformance/ConformanceDriver.java
fi
exec java -XX:TieredStopAtLevel=1 -Xshare:auto -cp "$pkg/target/classes:$pkg/target/conformance" ConformanceDriver --cases "$cases" "$@"
