#!/usr/bin/env bash
# The other rate-limit services of `make bench-peers`, located outside the
# repository. This repository builds none of them and holds nothing of
# theirs: give it binaries you have.
#
#   limitador       Kuadrant's Limitador (Rust), its limitador-server
#   envoyratelimit  envoyproxy/ratelimit (Go), its service binary; it runs
#                   on Redis
#   redis-server    Debian's (apt-get install -y redis-server)
#   wrk             Debian's (apt-get install -y wrk): the HTTP load driver
#
# Usage:
#   bash internal/bench/peers.sh locate
#       print one line per peer and tool, tab-separated:
#         NAME  found    PATH
#         NAME  missing  WHAT TO DO
#
# Settings (environment):
#   PEERS_DIR             where the binaries are looked for (default
#                         $HOME/.cache/dynalimit/peers: limitador-server,
#                         envoy-ratelimit); a NAME.txt beside a binary (say,
#                         limitador-server.txt) saying what it is and from
#                         which commit is printed in the report
#   LIMITADOR_BIN         a limitador-server elsewhere
#   ENVOY_RATELIMIT_BIN   an envoyproxy/ratelimit binary elsewhere
#   REDIS_SERVER, WRK     the Debian binaries (default: from PATH)
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-$HOME/.cache/dynalimit/peers}

die() { echo "peers: $*" >&2; exit 1; }

cd "$(dirname "$0")/../.."
[[ -f go.mod ]] || die "cannot find the repository root"

# limitador_bin / envoy_ratelimit_bin: where the binary is looked for.
limitador_bin() { echo "${LIMITADOR_BIN:-$PEERS_DIR/limitador-server}"; }
envoy_ratelimit_bin() { echo "${ENVOY_RATELIMIT_BIN:-$PEERS_DIR/envoy-ratelimit}"; }

# locate_one NAME PATH HOW: one line of `locate`.
locate_one() {
	if [[ -n $2 && -x $2 && ! -d $2 ]]; then
		printf '%s\tfound\t%s\n' "$1" "$2"
	else
		printf '%s\tmissing\t%s\n' "$1" "$3"
	fi
}

locate() {
	local bin
	bin=$(limitador_bin)
	if [[ -n ${LIMITADOR_BIN:-} ]]; then
		locate_one limitador "$bin" "LIMITADOR_BIN=$bin is not an executable file"
	else
		locate_one limitador "$bin" "no $bin: put a limitador-server (Kuadrant/limitador) there, or set LIMITADOR_BIN"
	fi
	bin=$(envoy_ratelimit_bin)
	if [[ -n ${ENVOY_RATELIMIT_BIN:-} ]]; then
		locate_one envoyratelimit "$bin" "ENVOY_RATELIMIT_BIN=$bin is not an executable file"
	else
		locate_one envoyratelimit "$bin" "no $bin: put an envoyproxy/ratelimit binary there, or set ENVOY_RATELIMIT_BIN"
	fi
	locate_one redis-server "${REDIS_SERVER:-$(command -v redis-server || true)}" "no redis-server (envoyproxy/ratelimit's store): apt-get install -y redis-server, or set REDIS_SERVER"
	locate_one wrk "${WRK:-$(command -v wrk || true)}" "no wrk (the HTTP load driver): apt-get install -y wrk, or set WRK"
}

case ${1:-} in
locate) locate ;;
*) die "usage: peers.sh locate" ;;
esac
