#!/usr/bin/env bash
# gRPC load benchmark: ghz against the ratelimit binary and, in the same run,
# against internal/bench/trivialrls (a RateLimitService that answers OK at
# once, same grpc-go version and server defaults). Run by `make bench-grpc`;
# figures and the reading of them live in BENCHMARKS.md ("gRPC load").
#
# Scenarios, each driven by CONCURRENCY callers over one connection for
# DURATION after a WARMUP run that is not measured:
#   hot       one descriptor value for every call (one bucket)
#   distinct  KEYS distinct values, cycled in order (KEYS buckets)
# Each scenario runs first against the trivial server and then against ours
# with the same request data, so the client's cost is the same on both sides
# and the ratios measure what the decision path adds on top of gRPC.
#
# Reported per run: decisions/s (OK answers over the measured time), p50 and
# p99 latency, errors, and server CPU per decision (utime+stime of the server
# process from /proc/PID/stat, before and after the measured run). Targets:
# ours/trivial throughput >= 0.80 and ours/trivial p99 <= 1.5.
#
# Settings (environment):
#   DURATION=15s WARMUP=3s CONCURRENCY=50 KEYS=10000 ROUNDS=1
#   GHZ=path           ghz binary (default: $(go env GOPATH)/bin/ghz, installed
#                      at GHZ_VERSION when missing)
#   OURS=ratelimit     set OURS=trivial for an A/A run of the harness itself
#   PROFILE=SECONDS    also take a CPU profile of ours during the first measured
#                      run of PROFILE_SCENARIO and print `go tool pprof -top`
#                      of it (0 = off)
#   PROFILE_SCENARIO=hot  or distinct
#   BENCH_OUT=DIR      keep ghz reports, server logs and the profile in DIR
#
# Traffic goes to loopback only; every process started here is stopped on
# exit. The run is bounded: 2 scenarios x 2 servers x ROUNDS x (WARMUP+DURATION).
set -euo pipefail

DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
CONCURRENCY=${CONCURRENCY:-50}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-1}
OURS=${OURS:-ratelimit}
PROFILE=${PROFILE:-0}
PROFILE_SCENARIO=${PROFILE_SCENARIO:-hot}
GHZ_VERSION=v0.121.0
GO=${GO:-go}
CALL=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

die() { echo "bench-grpc: $*" >&2; exit 1; }

cd "$(dirname "$0")/../.."
[[ -f go.mod ]] || die "cannot find the repository root"
[[ $ROUNDS =~ ^[1-9]$ ]] || die "ROUNDS must be 1..9, got $ROUNDS"
[[ $KEYS =~ ^[0-9]+$ && $KEYS -ge 1 && $KEYS -le 1000000 ]] || die "KEYS must be 1..1000000, got $KEYS"
[[ $CONCURRENCY =~ ^[0-9]+$ && $CONCURRENCY -ge 1 ]] || die "CONCURRENCY must be a positive integer"
[[ $PROFILE =~ ^[0-9]+$ ]] || die "PROFILE must be a number of seconds"
case $OURS in ratelimit | trivial) ;; *) die "OURS must be ratelimit or trivial, got $OURS" ;; esac
case $PROFILE_SCENARIO in hot | distinct) ;; *) die "PROFILE_SCENARIO must be hot or distinct, got $PROFILE_SCENARIO" ;; esac

# dur_seconds 15s|1m|500ms -> seconds as a decimal.
dur_seconds() {
	local d=$1
	case $d in
	*ms) awk -v v="${d%ms}" 'BEGIN { print v / 1000 }' ;;
	*s) echo "${d%s}" ;;
	*m) awk -v v="${d%m}" 'BEGIN { print v * 60 }' ;;
	*) die "durations are written like 15s, 500ms or 1m, got $d" ;;
	esac
}
MEASURE_S=$(dur_seconds "$DURATION")
dur_seconds "$WARMUP" >/dev/null

GHZ=${GHZ:-$($GO env GOPATH)/bin/ghz}
if [[ ! -x $GHZ ]]; then
	echo "== installing ghz $GHZ_VERSION (a minute or two)" >&2
	GOBIN=$(dirname "$GHZ") $GO install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" ||
		die "go install github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION failed"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-grpc.XXXXXX")
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ -n ${BENCH_OUT:-} ]]; then
		mkdir -p "$BENCH_OUT" && cp -r "$TMP"/. "$BENCH_OUT"/ 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building" >&2
$GO build -o "$TMP/trivialrls" ./internal/bench/trivialrls || die "build trivialrls failed"
if [[ $OURS == ratelimit ]]; then
	$GO build -o "$TMP/ratelimit" ./cmd/ratelimit || die "build ./cmd/ratelimit failed"
fi

# The descriptor config: any value of key "key" in domain "bench" gets its own
# bucket, and the limit is far above what the machine can reach, so every
# decision is an admission and the run measures the decision path.
mkdir -p "$TMP/config"
cat >"$TMP/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
EOF

# Request data: one message for the hot key, a JSON array of KEYS messages for
# distinct keys (ghz cycles through an array by request number). Template
# processing is off on both, so the client does the same work per call.
msg() { printf '{"domain":"bench","descriptors":[{"entries":[{"key":"key","value":"%s"}]}],"hits_addend":1}' "$1"; }
msg hot >"$TMP/hot.json"
{
	printf '['
	for ((i = 0; i < KEYS; i++)); do
		((i > 0)) && printf ','
		msg "k$i"
	done
	printf ']'
} >"$TMP/distinct.json"

# free_port prints a loopback TCP port nobody listens on.
free_port() {
	local p tries
	for ((tries = 0; tries < 200; tries++)); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# accepting HOST PORT: whether something accepts TCP connections there.
accepting() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# http_ok PORT PATH: whether GET answers 200.
http_ok() {
	local line
	{
		exec 3<>"/dev/tcp/127.0.0.1/$1" &&
			printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3 &&
			IFS= read -r -t 2 line <&3 && [[ $line == *" 200 "* ]]
	} 2>/dev/null
}

# wait_ready NAME PID CHECK...: poll CHECK for up to 20 s; fail if PID dies.
wait_ready() {
	local name=$1 pid=$2 i
	shift 2
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || { cat "$TMP/$name.log" >&2; die "$name exited during start"; }
		if "$@"; then return; fi
		sleep 0.1
	done
	cat "$TMP/$name.log" >&2
	die "$name not ready within 20 s"
}

# Start the trivial server.
TRIV_PORT=$(free_port)
"$TMP/trivialrls" -addr "127.0.0.1:$TRIV_PORT" >"$TMP/trivial.log" 2>&1 &
TRIV_PID=$!
PIDS+=("$TRIV_PID")
wait_ready trivial "$TRIV_PID" accepting 127.0.0.1 "$TRIV_PORT"

# Start ours.
OURS_PORT=$(free_port)
OURS_HTTP=0 OURS_DEBUG=0
if [[ $OURS == ratelimit ]]; then
	OURS_HTTP=$(free_port)
	OURS_DEBUG=$(free_port)
	while [[ $OURS_HTTP == "$OURS_PORT" || $OURS_DEBUG == "$OURS_PORT" || $OURS_DEBUG == "$OURS_HTTP" ]]; do
		OURS_HTTP=$(free_port)
		OURS_DEBUG=$(free_port)
	done
	env GRPC_HOST=127.0.0.1 GRPC_PORT="$OURS_PORT" HOST=127.0.0.1 PORT="$OURS_HTTP" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$OURS_DEBUG" LOG_LEVEL=warn SHUTDOWN_DRAIN=0s \
		"$TMP/ratelimit" serve -config_dir "$TMP/config" >"$TMP/ours.log" 2>&1 &
	OURS_PID=$!
	PIDS+=("$OURS_PID")
	wait_ready ours "$OURS_PID" http_ok "$OURS_HTTP" /healthcheck
else
	"$TMP/trivialrls" -addr "127.0.0.1:$OURS_PORT" >"$TMP/ours.log" 2>&1 &
	OURS_PID=$!
	PIDS+=("$OURS_PID")
	wait_ready ours "$OURS_PID" accepting 127.0.0.1 "$OURS_PORT"
fi

CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: utime+stime of PID in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the parenthesised command name).
cpu_ticks() {
	local stat
	stat=$(</proc/"$1"/stat)
	stat=${stat##*) }
	awk '{ print $12 + $13 }' <<<"$stat"
}

# busy_ticks: clock ticks all cores spent busy since boot (user, nice, system,
# irq, softirq and steal from the cpu line of /proc/stat).
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# snap_children records the builtin `times` of this shell; it must run in this
# shell, not a subshell, to see the finished children (the ghz runs).
snap_children() { times >"$TMP/times"; }
# children_ticks: the CPU of this shell's finished children at the last
# snap_children, in clock ticks (second line of `times`: user and system).
children_ticks() {
	awk -v hz="$CLK_TCK" 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }
		printf "%.0f", t * hz
	}' "$TMP/times"
}

# json_num FILE KEY: the first number after "KEY": in a ghz JSON report.
json_num() { grep -o "\"$2\":[0-9.eE+-]*" "$1" | head -n1 | cut -d: -f2; }
# json_pct FILE P: the latency at percentile P, in nanoseconds.
json_pct() { grep -o "\"percentage\":$2,\"latency\":[0-9]*" "$1" | head -n1 | awk -F: '{ print $3 }'; }
# json_ok FILE: the number of OK answers.
json_ok() { grep -o '"statusCodeDistribution":{[^}]*}' "$1" | grep -o '"OK":[0-9]*' | cut -d: -f2; }

# ghz_run PORT DATAFILE DURATION OUT
ghz_run() {
	"$GHZ" --insecure --call "$CALL" --data-file "$2" \
		--disable-template-data --disable-template-functions \
		-c "$CONCURRENCY" -z "$3" --duration-stop ignore --connect-timeout 5s -t 5s \
		-O json -o "$4" "127.0.0.1:$1" >/dev/null 2>"$4.err" ||
		{ cat "$4.err" >&2; die "ghz against 127.0.0.1:$1 failed"; }
}

ROWS=()
RATIOS=()

# ratio_row ROUND SCENARIO THROUGHPUT_RATIO P99_RATIO: one row of the ratio table.
ratio_row() {
	awk -v r="$1" -v s="$2" -v tr="$3" -v pr="$4" 'BEGIN {
		v = (tr >= 0.80 && pr <= 1.5) ? "meets" : "misses"
		printf "| %s | %s | %.2f | %.2f | %s |", r, s, tr, pr, v
	}'
}

# median FILE: the median of the numbers in FILE, one a line.
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
profile_top=""

# measure NAME PID PORT SCENARIO ROUND: warm up, then one measured run; sets
# the globals RPS P50 P99 ERRS CPU_US GHZ_US OTHER (cores busy with processes other
# than the server under test and ghz: other load on the machine, which makes a
# run noisy; near 0 is a clean run).
measure() {
	local name=$1 pid=$2 port=$3 scen=$4 round=$5 out t0 t1 b0 b1 c0 c1 count ok prof_pid=""
	out="$TMP/$scen-$name-$round.json"
	ghz_run "$port" "$TMP/$scen.json" "$WARMUP" "$out.warmup"
	if [[ $PROFILE -gt 0 && $name == ours && $scen == "$PROFILE_SCENARIO" && $OURS == ratelimit && $round == 1 ]]; then
		curl -fsS --max-time $((PROFILE + 10)) -o "$TMP/cpu.pprof" \
			"http://127.0.0.1:$OURS_DEBUG/debug/pprof/profile?seconds=$PROFILE" &
		prof_pid=$!
		sleep 0.2
	fi
	t0=$(cpu_ticks "$pid")
	b0=$(busy_ticks)
	snap_children
	c0=$(children_ticks)
	ghz_run "$port" "$TMP/$scen.json" "$DURATION" "$out"
	t1=$(cpu_ticks "$pid")
	b1=$(busy_ticks)
	snap_children
	c1=$(children_ticks)
	if [[ -n $prof_pid ]]; then
		wait "$prof_pid" || die "fetching the CPU profile failed"
		profile_top=$($GO tool pprof -top -nodecount=40 "$TMP/ratelimit" "$TMP/cpu.pprof" 2>&1)
	fi
	count=$(json_num "$out" count)
	ok=$(json_ok "$out")
	ok=${ok:-0}
	ERRS=$((count - ok))
	RPS=$(awk -v n="$ok" -v s="$MEASURE_S" 'BEGIN { printf "%.0f", n / s }')
	P50=$(awk -v v="$(json_pct "$out" 50)" 'BEGIN { printf "%.2f", v / 1e6 }')
	P99=$(awk -v v="$(json_pct "$out" 99)" 'BEGIN { printf "%.2f", v / 1e6 }')
	CPU_US=$(awk -v d="$((t1 - t0))" -v hz="$CLK_TCK" -v n="$ok" \
		'BEGIN { if (n > 0) printf "%.1f", d / hz / n * 1e6; else print "n/a" }')
	OTHER=$(awk -v b="$((b1 - b0))" -v c="$((c1 - c0))" -v t="$((t1 - t0))" -v hz="$CLK_TCK" -v s="$MEASURE_S" \
		'BEGIN { o = (b - c - t) / hz / s; if (o < 0) o = 0; printf "%.2f", o }')
	GHZ_US=$(awk -v d="$((c1 - c0))" -v hz="$CLK_TCK" -v n="$count" \
		'BEGIN { if (n > 0) printf "%.1f", d / hz / n * 1e6; else print "n/a" }')
	ROWS+=("| $round | $scen | $name | $RPS | $P50 | $P99 | $ERRS | $CPU_US | $GHZ_US | $OTHER |")
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "== $CONCURRENCY callers, warm-up $WARMUP, measured $DURATION per run, $KEYS distinct keys, ours=$OURS" >&2
for ((round = 1; round <= ROUNDS; round++)); do
	for scen in hot distinct; do
		echo "== round $round, $scen: trivial" >&2
		measure trivial "$TRIV_PID" "$TRIV_PORT" "$scen" "$round"
		t_rps=$RPS t_p99=$P99
		echo "== round $round, $scen: ours" >&2
		measure ours "$OURS_PID" "$OURS_PORT" "$scen" "$round"
		RATIOS+=("$(ratio_row "$round" "$scen" "$(awk -v a="$RPS" -v b="$t_rps" 'BEGIN { print a / b }')" \
			"$(awk -v a="$P99" -v b="$t_p99" 'BEGIN { print a / b }')")")
		awk -v a="$RPS" -v b="$t_rps" 'BEGIN { print a / b }' >>"$TMP/$scen.tput"
		awk -v a="$P99" -v b="$t_p99" 'BEGIN { print a / b }' >>"$TMP/$scen.p99"
	done
done

echo
echo "| round | scenario | server | decisions/s | p50 ms | p99 ms | errors | server CPU µs/decision | ghz CPU µs/call | other load, cores |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo
echo "| round | scenario | ours/trivial throughput (≥ 0.80) | ours/trivial p99 (≤ 1.5) | targets |"
echo "|---|---|---:|---:|---|"
printf '%s\n' "${RATIOS[@]}"
if ((ROUNDS > 1)); then
	for scen in hot distinct; do
		ratio_row median "$scen" "$(median "$TMP/$scen.tput")" "$(median "$TMP/$scen.p99")"
		echo
	done
fi
echo
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $OURS == ratelimit ]]; then
	# Every decision should be an admission matched by the bench rule; the
	# server's own counters say so (warm-ups included).
	echo
	echo "ours' decision counters (/metrics, warm-ups included):"
	curl -fsS --max-time 5 "http://127.0.0.1:$OURS_DEBUG/metrics" 2>/dev/null |
		grep -E '^ratelimit_(decisions_total|rule_hits_total|on_unavailable_total)' | sed 's/^/    /' ||
		echo "    (no counters read)"
fi
if [[ -n $profile_top ]]; then
	echo
	echo "CPU profile of ours during the first $PROFILE_SCENARIO run (${PROFILE}s):"
	echo "$profile_top"
fi
