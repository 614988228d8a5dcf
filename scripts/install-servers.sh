#!/usr/bin/env bash
# install-servers.sh — install the database servers the tests start for real
# (internal/testserver), on Debian/Ubuntu, only where a binary is missing.
#
# Idempotent: with everything present it changes nothing and needs no network.
# Runs apt-get update at most once, before the first install. Needs root or
# sudo. Exits non-zero with a message naming what is missing on failure.
#
# Usage: scripts/install-servers.sh            # everything
#        scripts/install-servers.sh redis      # only the named groups
set -euo pipefail

log() { printf 'install-servers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Each group lists "binary:package" pairs: the package is installed when the
# binary cannot be found. (redis-server --sentinel is what testserver runs;
# redis-sentinel is installed for people who want the separate command.)
group_redis=(
	"redis-server:redis-server"
	"redis-cli:redis-tools"
	"redis-sentinel:redis-sentinel"
)
# MariaDB 10.6+ (Debian 12 has 10.11): testserver runs mariadb-install-db
# and mariadbd from mariadb-server; the mariadb client is for people.
group_mariadb=(
	"mariadbd:mariadb-server"
	"mariadb-install-db:mariadb-server"
	"mariadb:mariadb-client"
)
# PostgreSQL: Debian keeps initdb and postgres in /usr/lib/postgresql/<major>/bin,
# outside $PATH, where testserver looks for them; pg_ctlcluster (postgresql-common,
# pulled in by the server package) is the binary on $PATH that shows it is installed.
group_postgres=(
	"pg_ctlcluster:postgresql"
	"psql:postgresql-client"
)
# etcd (Debian's etcd-server, 3.4): testserver runs /usr/bin/etcd.
group_etcd=(
	"etcd:etcd-server"
)
# ZooKeeper 3.8, standalone: testserver runs the server class from the jars in
# /usr/share/java with the machine's Java (Debian keeps zkServer.sh outside $PATH).
group_zookeeper=(
	"/usr/share/zookeeper/bin/zkServer.sh:zookeeper"
	"java:default-jre-headless"
)
# Headless Chromium for the dashboard's browser test (driven by chromedp).
group_browser=(
	"chromium:chromium"
)
# promtool (Debian ships it in prometheus) checks and tests the shipped alert
# rules, deploy/prometheus (TestPrometheusRules); the server is not started.
group_prometheus=(
	"promtool:prometheus"
)
# The deployment files (systest/deploy): systemd-analyze verifies the unit,
# podman builds and runs the image's last stage (runc: crun cannot run
# under the hybrid cgroup layout some machines have).
group_deploy=(
	"systemd-analyze:systemd"
	"podman:podman"
	"runc:runc"
)
all_groups=(redis mariadb postgres etcd zookeeper browser prometheus deploy)

have() {
	command -v "$1" >/dev/null 2>&1 && return 0
	local d
	for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
		[[ -x "$d/$1" ]] && return 0
	done
	return 1
}

groups=("$@")
[[ ${#groups[@]} -gt 0 ]] || groups=("${all_groups[@]}")

missing_bins=()
packages=()
for g in "${groups[@]}"; do
	declare -p "group_$g" >/dev/null 2>&1 || die "unknown group '$g' (known: ${all_groups[*]})"
	declare -n pairs="group_$g"
	for pair in "${pairs[@]}"; do
		bin=${pair%%:*} pkg=${pair#*:}
		if ! have "$bin"; then
			missing_bins+=("$bin")
			[[ " ${packages[*]-} " == *" $pkg "* ]] || packages+=("$pkg")
		fi
	done
	unset -n pairs
done

if [[ ${#packages[@]} -eq 0 ]]; then
	log "all present (${groups[*]})"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
	die "missing ${missing_bins[*]} and no apt-get here: install packages ${packages[*]} by hand"

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || die "missing ${missing_bins[*]}: need root or sudo to install ${packages[*]}"
	sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
log "installing ${packages[*]} (missing: ${missing_bins[*]})"
"${sudo[@]}" apt-get update -qq || die "apt-get update failed"
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" ||
	die "apt-get install ${packages[*]} failed"

still=()
for bin in "${missing_bins[@]}"; do
	have "$bin" || still+=("$bin")
done
[[ ${#still[@]} -eq 0 ]] || die "still missing after install: ${still[*]}"
log "installed ${packages[*]}"
