#!/usr/bin/env bash
# Install the Debian packages the kit needs, only those missing; needs root to install.
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "cnikit: missing Debian packages: ${missing[*]} (run 'make setup' as root or install them)" >&2
    exit 0
fi
echo "cnikit: installing Debian packages: ${missing[*]} (apt-get; the first time takes a minute)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
