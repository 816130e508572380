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
# No package's postinst may start a service of the machine's own (docker.io would start the
# machine's dockerd): a policy-rc.d answering 101 ("not allowed") during the install, removed
# after, and only if the machine had none of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# cnikit (scripts/apt-deps.sh): no service starts during this install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
