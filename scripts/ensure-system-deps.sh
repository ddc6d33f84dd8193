#!/usr/bin/env bash
# Installs what the project needs from the OS when it is absent: a Java runtime (Spark), the
# PostgreSQL server binaries (the lock tests start a throwaway server), Maven (it fetches Apache
# Hudi's bundle for the tests that run Hudi) and Chromium (the status page is tested headless). Needs root only to install.
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the status page test renders it
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages: ${need[*]} (run as root, or install them: apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
