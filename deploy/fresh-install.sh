#!/bin/bash
# Install the package as an operator would on a fresh Debian 12: a minimal bookworm made by
# debootstrap in a directory, `dpkg -i` there (its dependencies missing), `apt-get -f install`,
# then rlm run, its rule file checked, `systemd-analyze verify` of the unit (systemd and man-db
# installed for it), and `dpkg -P` leaving nothing. The directory is removed at the end.
set -euo pipefail
deb=$(realpath "${1:?usage: fresh-install.sh PACKAGE.deb}")
root=$(mktemp -d /var/tmp/rlm-fresh.XXXXXX)
chmod 755 "$root"
cleanup() { umount "$root/proc" 2>/dev/null || true; rm -rf "$root"; }
trap cleanup EXIT
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 || { tail -n 20 "$root.log"; exit 1; }
rm -f "$root.log"
cp "$deb" "$root/tmp/rlm.deb"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" bash -euo pipefail -c '
	export DEBIAN_FRONTEND=noninteractive
	if dpkg -i /tmp/rlm.deb >/dev/null 2>&1; then echo "fresh-install: dpkg -i needed nothing more"; else echo "fresh-install: dpkg -i left dependencies to install"; fi
	apt-get update -qq
	apt-get -f install -y -qq >/dev/null
	dpkg -s rlm | grep -qx "Status: install ok installed"
	rlm --version
	rlm check /etc/rlm/rules.rlm
	apt-get install -y -qq systemd man-db >/dev/null 2>&1
	systemd-analyze verify /usr/lib/systemd/system/rlm.service
	man -w rlm rlm-run rlm-top >/dev/null
	dpkg -P rlm >/dev/null
	test ! -e /usr/bin/rlm && test ! -e /etc/rlm
	echo "fresh-install: installed, checked, verified and purged on a fresh bookworm"
'
