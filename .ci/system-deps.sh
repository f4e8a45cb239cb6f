#!/usr/bin/env bash
# Installs the Debian packages the netns tier and the benches drive for real (sshd, dockerd, ip, nft,
# busybox; rsync: the baseline of bench/weights_push.py; systemd-analyze: the serving watch's unit
# file is verified by it).
# As root it installs what is missing; as anyone else it says loudly that the netns tier will skip.
set -euo pipefail
need=(openssh-server docker.io iproute2 nftables busybox-static zstd tmux rsync systemd)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "!!! not root: cannot install ${missing[*]}; the netns tier will SKIP (it is not passed) !!!" >&2
  exit 0
fi
echo "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
