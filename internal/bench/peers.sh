#!/usr/bin/env bash
# The other rate-limit services of `make bench-peers`, built or located
# outside the repository (nothing of theirs is committed here):
#
#   limitador       Kuadrant's Limitador (Rust), limitador-server, built with
#                   `cargo build --release --locked -p limitador-server` from
#                   LIMITADOR_SRC, or from a clone at LIMITADOR_COMMIT.
#   envoyratelimit  envoyproxy/ratelimit (Go), built with `go build
#                   -mod=readonly ./src/service_cmd` (its Makefile's command)
#                   from ENVOY_RATELIMIT_SRC, or from a clone at
#                   ENVOY_RATELIMIT_COMMIT. It runs on Redis.
#   redis-server    Debian's (apt-get install -y redis-server).
#   wrk             Debian's (apt-get install -y wrk): the HTTP load driver.
#
# Usage:
#   bash internal/bench/peers.sh build [limitador|envoyratelimit|all]
#       build what is named (default all) into PEERS_DIR, with a NAME.txt
#       beside each binary saying what it was built from and how
#   bash internal/bench/peers.sh locate
#       print one line per peer and tool, tab-separated:
#         NAME  found    PATH
#         NAME  missing  WHAT TO DO
#       (what the benchmark reads; it builds nothing)
#
# Settings (environment):
#   PEERS_DIR             where the binaries go (default $HOME/.cache/dynalimit/peers)
#   LIMITADOR_BIN         a limitador-server built elsewhere: used as it is
#   LIMITADOR_SRC         a Limitador source tree to build (default: clone
#                         into PEERS_DIR/src/limitador at LIMITADOR_COMMIT)
#   ENVOY_RATELIMIT_BIN   an envoyproxy/ratelimit binary built elsewhere
#   ENVOY_RATELIMIT_SRC   its source tree (default: clone into
#                         PEERS_DIR/src/envoy-ratelimit at ENVOY_RATELIMIT_COMMIT)
#   LIMITADOR_SRC_COMMIT, ENVOY_RATELIMIT_SRC_COMMIT
#                         the commit a given source tree holds when it is not
#                         a git checkout (recorded as said, not checked)
#   REDIS_SERVER, WRK     the Debian binaries (default: from PATH)
#   CARGO_PROFILE_RELEASE_LTO
#                         Limitador's release profile uses full LTO with one
#                         codegen unit (a long build); "thin" shortens it, and
#                         the NAME.txt records which was used
#
# Building Limitador needs cargo, protoc and clang (apt-get install -y
# protobuf-compiler clang); envoyproxy/ratelimit needs Go and reaches the Go
# module proxy for its dependencies.
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-$HOME/.cache/dynalimit/peers}
LIMITADOR_REPO=https://github.com/Kuadrant/limitador
LIMITADOR_COMMIT=2981b2bd389d42cf668519f9aa981a53541c4278
ENVOY_RATELIMIT_REPO=https://github.com/envoyproxy/ratelimit
ENVOY_RATELIMIT_COMMIT=f2fb15770f7fd1c88ca6c3a1b58ee513917ace96
GO=${GO:-go}

die() { echo "peers: $*" >&2; exit 1; }
say() { echo "peers: $*" >&2; }

cd "$(dirname "$0")/../.."
[[ -f go.mod ]] || die "cannot find the repository root"

# limitador_bin / envoy_ratelimit_bin: where the binary is, built or given.
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
		locate_one limitador "$bin" "no $bin: build it with \`make peers\` (bash internal/bench/peers.sh build limitador; about 20 min on 2 cores) or set LIMITADOR_BIN"
	fi
	bin=$(envoy_ratelimit_bin)
	if [[ -n ${ENVOY_RATELIMIT_BIN:-} ]]; then
		locate_one envoyratelimit "$bin" "ENVOY_RATELIMIT_BIN=$bin is not an executable file"
	else
		locate_one envoyratelimit "$bin" "no $bin: build it with \`make peers\` (bash internal/bench/peers.sh build envoyratelimit) or set ENVOY_RATELIMIT_BIN"
	fi
	locate_one redis-server "${REDIS_SERVER:-$(command -v redis-server || true)}" "no redis-server (envoyproxy/ratelimit's store): apt-get install -y redis-server, or set REDIS_SERVER"
	locate_one wrk "${WRK:-$(command -v wrk || true)}" "no wrk (the HTTP load driver): apt-get install -y wrk, or set WRK"
}

# source_tree NAME SRC_VAR_VALUE REPO COMMIT: print the source tree to build,
# cloning REPO at COMMIT into PEERS_DIR/src/NAME when no tree is given.
source_tree() {
	local name=$1 given=$2 repo=$3 commit=$4 dir
	if [[ -n $given ]]; then
		[[ -d $given ]] || die "$name: source tree $given does not exist"
		echo "$given"
		return
	fi
	command -v git >/dev/null || die "$name: git is needed to clone $repo (or give its source tree)"
	dir=$PEERS_DIR/src/$name
	if [[ ! -d $dir/.git ]]; then
		say "$name: cloning $repo into $dir"
		rm -rf "$dir"
		git clone --quiet "$repo" "$dir" >&2 || die "$name: git clone $repo failed"
	fi
	git -C "$dir" checkout --quiet --detach "$commit" >&2 ||
		{ git -C "$dir" fetch --quiet origin >&2 && git -C "$dir" checkout --quiet --detach "$commit" >&2; } ||
		die "$name: commit $commit not found in $repo"
	echo "$dir"
}

# commit_of DIR PINNED [SAID]: the commit of a source tree, and whether it is
# the pinned one; SAID is what the caller says a tree that is not a git
# checkout holds.
commit_of() {
	local c
	if c=$(git -C "$1" rev-parse HEAD 2>/dev/null); then
		:
	elif [[ -n ${3:-} ]]; then
		c="$3 (given by *_SRC_COMMIT; $1 is not a git checkout)"
	else
		echo "unknown: $1 is not a git checkout (the pinned commit is $2)"
		return
	fi
	if [[ ${c%% *} == "$2" ]]; then
		echo "$c, the pinned commit"
	else
		echo "$c, NOT the pinned commit $2"
	fi
}

build_limitador() {
	local src out lto rustc
	out=$PEERS_DIR/limitador-server
	if [[ -n ${LIMITADOR_BIN:-} ]]; then
		[[ -x $LIMITADOR_BIN ]] || die "limitador: LIMITADOR_BIN=$LIMITADOR_BIN is not an executable file"
		say "limitador: LIMITADOR_BIN is set ($LIMITADOR_BIN); nothing to build"
		return
	fi
	local tool
	for tool in cargo protoc clang; do
		command -v "$tool" >/dev/null ||
			die "limitador: $tool is needed (cargo from rustup; apt-get install -y protobuf-compiler clang)"
	done
	src=$(source_tree limitador "${LIMITADOR_SRC:-}" "$LIMITADOR_REPO" "$LIMITADOR_COMMIT")
	lto=${CARGO_PROFILE_RELEASE_LTO:-full, as the release profile sets}
	rustc=$(rustc --version 2>/dev/null || echo "rustc: unknown")
	say "limitador: cargo build --release --locked -p limitador-server in $src (LTO: $lto)"
	(cd "$src" && cargo build --release --locked -p limitador-server) || die "limitador: cargo build failed"
	mkdir -p "$PEERS_DIR"
	install -m 0755 "$src/target/release/limitador-server" "$out"
	{
		echo "limitador-server, Kuadrant's Limitador"
		echo "source: $src"
		echo "commit: $(commit_of "$src" "$LIMITADOR_COMMIT" "${LIMITADOR_SRC_COMMIT:-}")"
		echo "built: cargo build --release --locked -p limitador-server; LTO: $lto; $rustc; $(date -u +%FT%TZ)"
	} >"$out.txt"
	say "limitador: $out"
}

build_envoy_ratelimit() {
	local src out
	out=$PEERS_DIR/envoy-ratelimit
	if [[ -n ${ENVOY_RATELIMIT_BIN:-} ]]; then
		[[ -x $ENVOY_RATELIMIT_BIN ]] || die "envoyratelimit: ENVOY_RATELIMIT_BIN=$ENVOY_RATELIMIT_BIN is not an executable file"
		say "envoyratelimit: ENVOY_RATELIMIT_BIN is set ($ENVOY_RATELIMIT_BIN); nothing to build"
		return
	fi
	src=$(source_tree envoy-ratelimit "${ENVOY_RATELIMIT_SRC:-}" "$ENVOY_RATELIMIT_REPO" "$ENVOY_RATELIMIT_COMMIT")
	[[ -d $src/src/service_cmd ]] || die "envoyratelimit: $src has no src/service_cmd"
	mkdir -p "$PEERS_DIR"
	say "envoyratelimit: go build -mod=readonly ./src/service_cmd in $src"
	(cd "$src" && $GO build -mod=readonly -o "$out" ./src/service_cmd) || die "envoyratelimit: go build failed"
	{
		echo "envoy-ratelimit, envoyproxy/ratelimit"
		echo "source: $src"
		echo "commit: $(commit_of "$src" "$ENVOY_RATELIMIT_COMMIT" "${ENVOY_RATELIMIT_SRC_COMMIT:-}")"
		echo "built: go build -mod=readonly ./src/service_cmd; $($GO version); $(date -u +%FT%TZ)"
	} >"$out.txt"
	say "envoyratelimit: $out"
}

cmd=${1:-}
case $cmd in
locate)
	[[ $# -eq 1 ]] || die "usage: peers.sh locate"
	locate
	;;
build)
	what=${2:-all}
	case $what in
	limitador) build_limitador ;;
	envoyratelimit) build_envoy_ratelimit ;;
	all)
		build_envoy_ratelimit
		build_limitador
		;;
	*) die "build what? limitador, envoyratelimit or all, got $what" ;;
	esac
	# What the benchmark will find, including the Debian tools.
	locate | while IFS=$'\t' read -r name state what; do
		say "$name: $state: $what"
	done
	;;
*) die "usage: peers.sh build [limitador|envoyratelimit|all] | peers.sh locate" ;;
esac
