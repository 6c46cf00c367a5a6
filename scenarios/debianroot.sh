#!/usr/bin/env bash
# The Debian 12 root TestHostUnderSystemd boots: debootstrap's minbase with
# systemd as init and what the package and the test use, debootstrapped
# once per package list and mirror into
# ~/.cache/teapot-lb/bookworm-root/KEY/rootfs (the test boots overlays of
# it and never writes it). Prints that folder. .ci/run starts it early in
# the background; a second caller waits for the first (flock).
set -euo pipefail

suite=bookworm
mirror="${TEAPOT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=systemd,systemd-sysv,dbus,iproute2,ca-certificates,adduser,procps

key="$(printf '%s' "$suite minbase $packages $mirror" | sha256sum | cut -c1-12)"
dir="$HOME/.cache/teapot-lb/bookworm-root/$key"
mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9
if [ ! -e "$dir/complete" ]; then
	rm -rf "$dir/rootfs.partial"
	if ! debootstrap --variant=minbase --include="$packages" "$suite" "$dir/rootfs.partial" "$mirror" \
		>"$dir/debootstrap.log" 2>&1; then
		echo "debootstrap of the $suite root from $mirror failed:" >&2
		tail -n 30 "$dir/debootstrap.log" >&2
		exit 1
	fi
	# The downloaded packages are not needed again.
	rm -f "$dir/rootfs.partial/var/cache/apt/archives/"*.deb
	rm -rf "$dir/rootfs"
	mv "$dir/rootfs.partial" "$dir/rootfs"
	echo "$packages" >"$dir/complete"
fi
echo "$dir/rootfs"
