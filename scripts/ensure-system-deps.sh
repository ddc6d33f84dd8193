#!/usr/bin/env bash
# Installs what the project needs from the OS when it is absent, for one purpose:
#   demo  a Java runtime (Spark's JVM), and nothing else
#   test  also Maven (it fetches Apache Hudi's bundle for the tests that run Hudi), the PostgreSQL
#         server binaries (the lock tests start a throwaway server) and Chromium (the daemon's
#         status page is rendered headless)
# Needs root only to install; without root it names the packages and stops.
set -euo pipefail

purpose=${1:-test}
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ "$purpose" = test ]; then
  command -v mvn >/dev/null 2>&1 || need+=(maven)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    need+=(postgresql)
  fi
elif [ "$purpose" != demo ]; then
  echo "usage: $0 [demo|test]" >&2
  exit 2
fi
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages for the $purpose: ${need[*]} (run as root, or install them: apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing system packages for the $purpose: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
