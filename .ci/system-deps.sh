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
if [ ${#missing[@]} -ne 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "!!! not root: cannot install ${missing[*]}; the netns tier will SKIP (it is not passed) !!!" >&2
    exit 0
  fi
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Optional: a second Docker engine, for the containerd image store (issue 30 (d): nodes on it and
# nodes on overlay2 holding the same image are sent nothing). Debian trixie's docker.io (26.x) and
# containerd (1.7.x) are fetched by apt-get under a private apt configuration and UNPACKED (dpkg
# -x) under /opt/docker-trixie: nothing is installed over the system's packages. Their dockerd
# and containerd need glibc 2.34 (bookworm has 2.36); trixie's runc needs 2.38, so it is left
# out and the nodes keep the system's runc. Without it, the tests that need it FAIL under
# CI=true as root and SKIP loudly otherwise; bench/image_push.py says (d) was NOT measured.
engine=/opt/docker-trixie
if [ -x "$engine/usr/sbin/dockerd" ] && [ -x "$engine/usr/bin/containerd" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "!!! not root: cannot unpack Debian trixie's docker.io under $engine; the containerd image store tests will SKIP (they are not passed) !!!" >&2
  exit 0
fi
apt_dir=$(mktemp -d)
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/etc/sources.list.d" "$apt_dir/etc/apt.conf.d" "$apt_dir/etc/preferences.d" \
  "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$apt_dir/root"
: >"$apt_dir/status"
printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: trixie" \
  "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
  >"$apt_dir/etc/sources.list.d/trixie.sources"
printf '%s\n' "Dir::Etc \"$apt_dir/etc\";" 'Dir::Etc::trustedparts "/etc/apt/trusted.gpg.d";' \
  "Dir::State::Lists \"$apt_dir/lists\";" "Dir::State::status \"$apt_dir/status\";" \
  "Dir::Cache \"$apt_dir/cache\";" "APT::Architecture \"$(dpkg --print-architecture)\";" \
  'APT::Sandbox::User "root";' >"$apt_dir/apt.conf"
if ! (export APT_CONFIG="$apt_dir/apt.conf" &&
      apt-get update -qq >/dev/null &&
      cd "$apt_dir/debs" && apt-get download -qq docker.io containerd >/dev/null); then
  echo "!!! could not fetch Debian trixie's docker.io and containerd (is deb.debian.org reachable?): the containerd image store tests will FAIL under CI=true and SKIP otherwise !!!" >&2
  exit 0
fi
for deb in "$apt_dir"/debs/*.deb; do
  dpkg -x "$deb" "$apt_dir/root"
done
rm -f "$apt_dir/root/usr/sbin/runc"
if ! "$apt_dir/root/usr/sbin/dockerd" --version >/dev/null 2>&1 ||
   ! "$apt_dir/root/usr/bin/containerd" --version >/dev/null 2>&1; then
  echo "!!! Debian trixie's dockerd or containerd does not run on this system: the containerd image store tests will FAIL under CI=true and SKIP otherwise !!!" >&2
  exit 0
fi
mkdir -p "$(dirname "$engine")"
mv "$apt_dir/root" "$engine"
echo "unpacked under $engine: $("$engine/usr/sbin/dockerd" --version); containerd $("$engine/usr/bin/containerd" --version | awk '{print $3}')"
