#!/usr/bin/env bash
#
# scripts/install-deps.sh: install everything shape_sync needs to build and test, on Debian 12.
#
# Idempotent: apt is skipped when every package is already installed, and `npm ci` only
# rebuilds test/node_modules. Runs as root (CI) or as a user with sudo.
#
#   SHAPE_SYNC_SKIP_APT=1    skip apt entirely (only the npm step runs)
#   SHAPE_SYNC_FORCE_APT=1   run apt-get update/install even when nothing is missing
#   SHAPE_SYNC_BENCH=1       also wrk, which bench/ compares against (nginx is always installed)
#
# Node.js and npm come from apt only when `node` or `npm` is missing: the machine image ships
# newer ones outside apt (Node 20, npm 11), which must never be replaced by Debian's.
# Installing postgresql-server-dev-15 may upgrade the server (15.18 -> 15.20): expected.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	SUDO=(sudo)
fi

say() { printf '[install-deps] %s\n' "$*"; }

# prometheus: for promtool, which checks GET /metrics (its service is not started in CI).
# dpkg-dev, debhelper, postgresql-server-dev-all: build the Debian package (pg_buildext, test/package/).
# chromium (and a font to draw text with): the browser tests (test/lib/browser.mjs).
# nginx: the proxy in front (examples/nginx, test/integration/nginx_proxy.sh); its service is
# not started.
packages=(
	build-essential pkg-config
	postgresql-15 postgresql-server-dev-15
	libmicrohttpd-dev
	postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
	clang libclang-rt-14-dev
	curl
	prometheus
	dpkg-dev debhelper postgresql-server-dev-all
	chromium fonts-dejavu-core
	nginx
)
if [[ ${SHAPE_SYNC_BENCH:-0} == 1 ]]; then
	packages+=(wrk)
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	packages+=(nodejs npm)
fi

if [[ ${SHAPE_SYNC_SKIP_APT:-0} == 1 ]]; then
	say "SHAPE_SYNC_SKIP_APT=1: skipping apt"
else
	missing=()
	for pkg in "${packages[@]}"; do
		status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) || status=
		if [[ $status != "install ok installed" ]]; then
			missing+=("$pkg")
		fi
	done
	if ((${#missing[@]} == 0)) && [[ ${SHAPE_SYNC_FORCE_APT:-0} != 1 ]]; then
		say "all Debian packages already installed"
	else
		if ((${#missing[@]})); then
			say "missing Debian packages: ${missing[*]}"
		fi
		"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
		"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			"${packages[@]}"
	fi
fi

if [[ -f test/package-lock.json ]]; then
	say "npm ci in test"
	(cd test && npm ci --no-audit --no-fund)
elif [[ -f test/package.json ]]; then
	say "warning: test/package.json has no package-lock.json; not installing its dependencies"
fi

if [[ -f examples/web/package-lock.json ]]; then
	say "npm ci in examples/web"
	(cd examples/web && npm ci --no-audit --no-fund)
fi

say "done"
