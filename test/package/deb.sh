#!/usr/bin/env bash
#
# test/package/deb.sh: the Debian package, as a PostgreSQL user gets it.
#
#   1. copies the source tree (what git tracks, and new files it does not ignore) to a
#      temporary folder and builds postgresql-15-shape-sync there with dpkg-buildpackage
#      (pg_buildext; the build runs the regression tests on a pg_virtualenv cluster);
#   2. installs the .deb with dpkg, over whatever `make install` left (dpkg replaces files
#      that no package owns), and checks that dpkg owns and verifies every installed file;
#   3. starts a cluster (scripts/lib/cluster.sh) that loads the installed library and runs
#      the regression tests against the installed copy (make installcheck), 09_upgrade among
#      them: ALTER EXTENSION shape_sync UPDATE from 0.1.0;
#   4. removes the package (purge) and checks that none of its files stay;
#   5. puts the checkout's own build back (make install) when there is one, so that a
#      developer's machine is left as it was.
#
# It changes what is installed system-wide: scripts/test.sh runs it alone, after every other
# stage that needs the installed extension. Needs root or sudo, and what
# scripts/install-deps.sh installs (dpkg-dev, debhelper, postgresql-server-dev-all).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	SUDO=(sudo)
fi
PG_CONFIG=${PG_CONFIG:-pg_config}
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$root/shape_sync.control")
pgmajor=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
package=postgresql-$pgmajor-shape-sync
work=$(mktemp -d)
chmod 755 "$work"  # the build-time test cluster runs as another user (pg_virtualenv), and reads the built files
installed_here=0

cleanup() {
	cluster_stop || true
	if ((installed_here)); then
		"${SUDO[@]}" dpkg --purge "$package" >/dev/null 2>&1 || true
		restore_checkout_build
	fi
	rm -rf "$work"
}
restore_checkout_build() {
	installed_here=0
	if [[ -f $root/shape_sync.so ]]; then
		"${SUDO[@]}" make -s -C "$root" install PG_CONFIG="$PG_CONFIG" >/dev/null
	fi
}
trap cleanup EXIT

# 1. build
src=$work/shape-sync-$version
mkdir -p "$src"
(cd "$root" && git ls-files -co --exclude-standard -z) |
	(cd "$root" && xargs -0 cp --parents -t "$src")
build() {
	(cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1
}
what="dpkg-buildpackage builds $package $version (with its build-time regression tests)"
if build; then
	pass "$what"
else
	fail "$what"
	tail -n 80 "$work/build.log"
	finish
fi
deb=$(ls "$work/${package}_${version}_"*.deb)
check "the build ran the regression tests and they passed" \
	grep -qE '^# All [0-9]+ tests passed|All [0-9]+ tests passed' "$work/build.log"
expect_match "the package depends on the server and on libmicrohttpd" \
	"postgresql-$pgmajor .*libmicrohttpd" "$(dpkg-deb -f "$deb" Depends | tr -d '\n')"

# 2. install
installed_here=1
check "dpkg installs it" "${SUDO[@]}" dpkg -i "$deb"
check "dpkg verifies every file it installed" "${SUDO[@]}" dpkg --verify "$package"
libdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)
owned() { [[ $(dpkg-query -S "$1" 2>/dev/null) == "$package: $1" ]]; }
check "the library is the package's" owned "$libdir/shape_sync.so"
scripts_owned() {
	local f
	for f in shape_sync.control "shape_sync--$version.sql" shape_sync--0.1.0.sql \
		"shape_sync--0.1.0--$version.sql"; do
		owned "$sharedir/extension/$f" || return 1
	done
}
check "and so are the control file and the SQL scripts, the upgrade script too" scripts_owned

# 3. the regression tests against the installed copy
cluster_start "$(cluster_free_port 4900)"
expect_match "the installed server names its version" "electric-server: shape_sync/$version" \
	"$(curl -s -D - -o /dev/null "$SHAPE_SYNC_URL/v1/health" | tr -d '\r')"
installcheck() {
	make -C "$src" installcheck PG_CONFIG="$PG_CONFIG" PGHOST="$PGHOST" PGPORT="$PGPORT" \
		PGUSER=postgres >"$work/installcheck.log" 2>&1
}
what="make installcheck passes against the installed copy"
if installcheck; then
	pass "$what"
	grep -E '\.\.\. +(ok|FAILED)' "$work/installcheck.log" | sed 's/^/# /'
else
	fail "$what"
	cat "$work/installcheck.log"
	if [[ -f $src/regression.diffs ]]; then
		head -n 200 "$src/regression.diffs"
	fi
fi
check "09_upgrade was among them" grep -qE '09_upgrade +\.\.\. +ok' "$work/installcheck.log"
cluster_stop

# 4. removal
check "dpkg --purge removes it" "${SUDO[@]}" dpkg --purge "$package"
none_left() {
	[[ ! -e $libdir/shape_sync.so ]] && ! compgen -G "$sharedir/extension/shape_sync[.-]*" >/dev/null
}
check "none of its files stay" none_left

# 5. the checkout's build back
restore_checkout_build
finish
