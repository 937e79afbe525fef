#!/bin/bash
# Check what `make deb` built: the files an operator's box needs, where they belong, the
# configuration kept as conffiles, the unit not started by the install, and the dependencies.
set -euo pipefail
deb=${1:?usage: check-deb.sh PACKAGE.deb}
files=$(dpkg-deb -c "$deb" | awk '{print $6}')
fail=0
for f in ./usr/bin/rlm ./etc/rlm/rlm.toml ./etc/rlm/rules.rlm ./usr/lib/systemd/system/rlm.service \
	./usr/share/man/man1/rlm.1.gz ./usr/share/man/man1/rlm-run.1.gz ./usr/share/man/man1/rlm-top.1.gz \
	./usr/share/doc/rlm/deployment.md ./usr/share/doc/rlm/grafana-dashboard.json; do
	grep -qxF "$f" <<<"$files" || { echo "check-deb: $deb lacks $f" >&2; fail=1; }
done
conffiles=$(dpkg-deb -I "$deb" conffiles)
for f in /etc/rlm/rlm.toml /etc/rlm/rules.rlm; do
	grep -qxF "$f" <<<"$conffiles" || { echo "check-deb: $f is not a conffile" >&2; fail=1; }
done
depends=$(dpkg-deb -f "$deb" Depends)
for d in libpcap0.8 iptables iproute2 procps; do
	grep -q "$d" <<<"$depends" || { echo "check-deb: Depends lacks $d: $depends" >&2; fail=1; }
done
if dpkg-deb -I "$deb" postinst 2>/dev/null | grep -qE 'deb-systemd-invoke (start|restart)'; then
	echo "check-deb: the install starts rlm (it needs its bridge configured first)" >&2; fail=1
fi
[ $fail = 0 ] && echo "check-deb: $deb: $(wc -l <<<"$files") paths, Depends: $depends"
exit $fail
