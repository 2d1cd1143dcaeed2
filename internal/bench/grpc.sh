#!/usr/bin/env bash
# gRPC load benchmark: ghz against the ratelimit binary and, in the same run,
# against internal/bench/trivialrls (a RateLimitService that answers OK at
# once, same grpc-go version and server defaults). Run by `make bench-grpc`;
# figures and the reading of them live in BENCHMARKS.md ("gRPC load").
# `make bench-peers` runs it too, on servers it started (TARGETS below).
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
# ours/trivial throughput >= 0.80 and ours/trivial p99 <= 1.5. Then the
# medians over the rounds, per scenario and server.
#
# Settings (environment):
#   DURATION=15s WARMUP=3s CONCURRENCY=50 KEYS=10000 ROUNDS=1
#   SCENARIOS=hot,distinct
#   GHZ=path           ghz binary (default: $(go env GOPATH)/bin/ghz, installed
#                      at GHZ_VERSION when missing)
#   OURS=ratelimit     set OURS=trivial for an A/A run of the harness itself
#   PROFILE=SECONDS    also take a CPU profile of ours during the first measured
#                      run of PROFILE_SCENARIO and print `go tool pprof -top`
#                      of it (0 = off)
#   PROFILE_SCENARIO=hot  or distinct
#   BENCH_OUT=DIR      keep ghz reports, server logs and the profile in DIR
#   TARGETS            servers already running, one a line:
#                        NAME HOST:PORT PID [HELPER_NAME HELPER_PID]
#                      (a helper is a process that does the server's work
#                      too, such as its Redis: its CPU is reported beside the
#                      server's). The script then starts no server and
#                      measures these in the order given; "ours" is compared
#                      with each other one, and the targets apply against
#                      "trivial" or "noop". OURS and PROFILE do not apply.
#   DESCRIPTOR_KEY=key the descriptor's key (domain "bench")
#   ROTATE=0           1: round r starts with the r-th server of the list
#
# ghz reads the service's descriptors from a protoset written by trivialrls
# (-protoset), not by reflection, since not every server registers it.
#
# Traffic goes to loopback only; every process started here is stopped on
# exit. The run is bounded: scenarios x servers x ROUNDS x (WARMUP+DURATION).
set -euo pipefail

DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
CONCURRENCY=${CONCURRENCY:-50}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-1}
OURS=${OURS:-ratelimit}
PROFILE=${PROFILE:-0}
PROFILE_SCENARIO=${PROFILE_SCENARIO:-hot}
SCENARIOS=${SCENARIOS:-hot,distinct}
TARGETS=${TARGETS:-}
DESCRIPTOR_KEY=${DESCRIPTOR_KEY:-key}
ROTATE=${ROTATE:-0}
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
IFS=, read -r -a SCENS <<<"$SCENARIOS"
((${#SCENS[@]} > 0)) || die "SCENARIOS is empty"
for scen in "${SCENS[@]}"; do
	case $scen in hot | distinct) ;; *) die "SCENARIOS lists hot and distinct, got $scen" ;; esac
done
[[ $DESCRIPTOR_KEY =~ ^[A-Za-z0-9_.-]+$ ]] || die "DESCRIPTOR_KEY must be a plain word, got $DESCRIPTOR_KEY"
case $ROTATE in 0 | 1) ;; *) die "ROTATE must be 0 or 1, got $ROTATE" ;; esac
if [[ -n $TARGETS && $PROFILE != 0 ]]; then
	die "PROFILE needs ours started here; it does not apply with TARGETS"
fi

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
"$TMP/trivialrls" -protoset "$TMP/rls.protoset" || die "trivialrls -protoset failed"
if [[ -z $TARGETS && $OURS == ratelimit ]]; then
	$GO build -o "$TMP/ratelimit" ./cmd/ratelimit || die "build ./cmd/ratelimit failed"
fi

# The descriptor config: any value of key "key" in domain "bench" gets its own
# bucket, and the limit is far above what the machine can reach, so every
# decision is an admission and the run measures the decision path.
mkdir -p "$TMP/config"
cat >"$TMP/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: $DESCRIPTOR_KEY
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
EOF

# Request data: one message for the hot key, a JSON array of KEYS messages for
# distinct keys (ghz cycles through an array by request number). Template
# processing is off on both, so the client does the same work per call.
msg() { printf '{"domain":"bench","descriptors":[{"entries":[{"key":"%s","value":"%s"}]}],"hits_addend":1}' "$DESCRIPTOR_KEY" "$1"; }
msg hot >"$TMP/hot.json"
if [[ ,$SCENARIOS, == *,distinct,* ]]; then
	{
		printf '['
		for ((i = 0; i < KEYS; i++)); do
			((i > 0)) && printf ','
			msg "k$i"
		done
		printf ']'
	} >"$TMP/distinct.json"
fi

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

# The servers measured: NAMES[i] at ADDRS[i] with process SPIDS[i], and
# optionally a helper process (HNAMES[i], HPIDS[i]; "" and 0 when none).
NAMES=() ADDRS=() SPIDS=() HNAMES=() HPIDS=()
OURS_HTTP=0 OURS_DEBUG=0
if [[ -n $TARGETS ]]; then
	while read -r name addr pid hname hpid extra; do
		[[ -z $name ]] && continue
		[[ -z $extra && $name =~ ^[a-z0-9_-]+$ && $addr =~ ^[0-9.]+:[0-9]+$ && $pid =~ ^[0-9]+$ ]] ||
			die "TARGETS: bad line: $name $addr $pid $hname $hpid $extra"
		kill -0 "$pid" 2>/dev/null || die "TARGETS: $name: no process $pid"
		accepting "${addr%:*}" "${addr##*:}" || die "TARGETS: $name: nothing accepts connections at $addr"
		if [[ -n $hname ]]; then
			[[ $hpid =~ ^[0-9]+$ ]] && kill -0 "$hpid" 2>/dev/null || die "TARGETS: $name: no helper process $hpid"
		fi
		NAMES+=("$name") ADDRS+=("$addr") SPIDS+=("$pid") HNAMES+=("$hname") HPIDS+=("${hpid:-0}")
	done <<<"$TARGETS"
	((${#NAMES[@]} > 0)) || die "TARGETS lists no server"
else
	# Start the trivial server.
	TRIV_PORT=$(free_port)
	"$TMP/trivialrls" -addr "127.0.0.1:$TRIV_PORT" >"$TMP/trivial.log" 2>&1 &
	TRIV_PID=$!
	PIDS+=("$TRIV_PID")
	wait_ready trivial "$TRIV_PID" accepting 127.0.0.1 "$TRIV_PORT"

	# Start ours.
	OURS_PORT=$(free_port)
	if [[ $OURS == ratelimit ]]; then
		OURS_HTTP=$(free_port)
		OURS_DEBUG=$(free_port)
		while [[ $OURS_HTTP == "$OURS_PORT" || $OURS_DEBUG == "$OURS_PORT" || $OURS_DEBUG == "$OURS_HTTP" ]]; do
			OURS_HTTP=$(free_port)
			OURS_DEBUG=$(free_port)
		done
		env GRPC_HOST=127.0.0.1 GRPC_PORT="$OURS_PORT" HOST=127.0.0.1 PORT="$OURS_HTTP" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$OURS_DEBUG" DEBUG_PPROF=true LOG_LEVEL=warn SHUTDOWN_DRAIN=0s \
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
	NAMES=(trivial ours) ADDRS=("127.0.0.1:$TRIV_PORT" "127.0.0.1:$OURS_PORT")
	SPIDS=("$TRIV_PID" "$OURS_PID") HNAMES=("" "") HPIDS=(0 0)
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

# ghz_run ADDR DATAFILE DURATION OUT
ghz_run() {
	"$GHZ" --insecure --protoset "$TMP/rls.protoset" --call "$CALL" --data-file "$2" \
		--disable-template-data --disable-template-functions \
		-c "$CONCURRENCY" -z "$3" --duration-stop ignore --connect-timeout 5s -t 5s \
		-O json -o "$4" "$1" >/dev/null 2>"$4.err" ||
		{ cat "$4.err" >&2; die "ghz against $1 failed"; }
}

ROWS=()
RATIOS=()

# is_noop NAME: whether NAME is the no-op server the targets are set against.
is_noop() { [[ $1 == trivial || $1 == noop ]]; }

# ratio_row ROUND SCENARIO OTHER THROUGHPUT_RATIO P99_RATIO: one row of the
# ratio table; the targets apply against the no-op server only.
ratio_row() {
	local verdict=1
	is_noop "$3" || verdict=0
	awk -v r="$1" -v s="$2" -v o="$3" -v tr="$4" -v pr="$5" -v verdict="$verdict" 'BEGIN {
		v = "–"
		if (verdict) v = (tr >= 0.80 && pr <= 1.5) ? "meets" : "misses"
		printf "| %s | %s | %s | %.2f | %.2f | %s |", r, s, o, tr, pr, v
	}'
}

# median FILE: the median of the numbers in FILE, one a line ("n/a" when none).
median() {
	[[ -s $1 ]] || { echo n/a; return; }
	sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
profile_top=""

# per_decision TICKS N: clock ticks spent over N decisions, in µs a decision.
per_decision() {
	awk -v d="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN { if (n > 0) printf "%.1f", d / hz / n * 1e6; else print "n/a" }'
}

# measure I SCENARIO ROUND: warm up, then one measured run against server I;
# sets the globals RPS P50 P99 ERRS CPU_US HELPER_US GHZ_US OTHER (cores busy
# with processes other than the server under test, its helper and ghz:
# other load on the machine, which makes a run noisy; near 0 is a clean run).
measure() {
	local i=$1 scen=$2 round=$3 name=${NAMES[$1]} addr=${ADDRS[$1]} pid=${SPIDS[$1]} hpid=${HPIDS[$1]}
	local out t0 t1 h0=0 h1=0 b0 b1 c0 c1 count ok prof_pid=""
	out="$TMP/$scen-$name-$round.json"
	ghz_run "$addr" "$TMP/$scen.json" "$WARMUP" "$out.warmup"
	if [[ $PROFILE -gt 0 && $name == ours && $scen == "$PROFILE_SCENARIO" && $OURS == ratelimit && $round == 1 ]]; then
		curl -fsS --max-time $((PROFILE + 10)) -o "$TMP/cpu.pprof" \
			"http://127.0.0.1:$OURS_DEBUG/debug/pprof/profile?seconds=$PROFILE" &
		prof_pid=$!
		sleep 0.2
	fi
	t0=$(cpu_ticks "$pid")
	((hpid > 0)) && h0=$(cpu_ticks "$hpid")
	b0=$(busy_ticks)
	snap_children
	c0=$(children_ticks)
	ghz_run "$addr" "$TMP/$scen.json" "$DURATION" "$out"
	t1=$(cpu_ticks "$pid")
	((hpid > 0)) && h1=$(cpu_ticks "$hpid")
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
	CPU_US=$(per_decision "$((t1 - t0))" "$ok")
	HELPER_US="–"
	((hpid > 0)) && HELPER_US="$(per_decision "$((h1 - h0))" "$ok") (${HNAMES[$i]})"
	OTHER=$(awk -v b="$((b1 - b0))" -v c="$((c1 - c0))" -v t="$((t1 - t0 + h1 - h0))" -v hz="$CLK_TCK" -v s="$MEASURE_S" \
		'BEGIN { o = (b - c - t) / hz / s; if (o < 0) o = 0; printf "%.2f", o }')
	GHZ_US=$(per_decision "$((c1 - c0))" "$count")
	ROWS+=("| $round | $scen | $name | $RPS | $P50 | $P99 | $ERRS | $CPU_US | $HELPER_US | $GHZ_US | $OTHER |")
	local f="$TMP/med-$scen-$name"
	echo "$RPS" >>"$f.rps"
	echo "$P50" >>"$f.p50"
	echo "$P99" >>"$f.p99"
	echo "$ERRS" >>"$f.errs"
	[[ $CPU_US == n/a ]] || echo "$CPU_US" >>"$f.cpu"
	((hpid > 0)) && [[ ${HELPER_US%% *} != n/a ]] && echo "${HELPER_US%% *}" >>"$f.helper"
	return 0
}

N=${#NAMES[@]}
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
keys=""
[[ ,$SCENARIOS, == *,distinct,* ]] && keys=", $KEYS distinct keys"
echo "== $CONCURRENCY callers, warm-up $WARMUP, measured $DURATION per run, scenarios ${SCENS[*]}$keys, servers ${NAMES[*]}" >&2
for ((round = 1; round <= ROUNDS; round++)); do
	for scen in "${SCENS[@]}"; do
		declare -A rps_of=() p99_of=()
		for ((k = 0; k < N; k++)); do
			i=$k
			((ROTATE == 1)) && i=$(((k + round - 1) % N))
			echo "== round $round, $scen: ${NAMES[$i]}" >&2
			measure "$i" "$scen" "$round"
			rps_of[${NAMES[$i]}]=$RPS p99_of[${NAMES[$i]}]=$P99
		done
		[[ -n ${rps_of[ours]:-} ]] || continue
		for name in "${NAMES[@]}"; do
			[[ $name == ours ]] && continue
			tr=$(awk -v a="${rps_of[ours]}" -v b="${rps_of[$name]}" 'BEGIN { print (b > 0) ? a / b : 0 }')
			pr=$(awk -v a="${p99_of[ours]}" -v b="${p99_of[$name]}" 'BEGIN { print (b > 0) ? a / b : 0 }')
			RATIOS+=("$(ratio_row "$round" "$scen" "$name" "$tr" "$pr")")
			echo "$tr" >>"$TMP/ratio-$scen-$name.tput"
			echo "$pr" >>"$TMP/ratio-$scen-$name.p99"
		done
	done
done

echo
echo "| round | scenario | server | decisions/s | p50 ms | p99 ms | errors | server CPU µs/decision | helper CPU µs/decision | ghz CPU µs/call | other load, cores |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo
echo "Medians over $ROUNDS round(s):"
echo
echo "| scenario | server | decisions/s | p50 ms | p99 ms | errors, total | server CPU µs/decision | helper CPU µs/decision |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for scen in "${SCENS[@]}"; do
	for ((i = 0; i < N; i++)); do
		f="$TMP/med-$scen-${NAMES[$i]}"
		helper="–"
		[[ -n ${HNAMES[$i]} ]] && helper="$(median "$f.helper") (${HNAMES[$i]})"
		echo "| $scen | ${NAMES[$i]} | $(median "$f.rps") | $(median "$f.p50") | $(median "$f.p99") | $(awk '{ s += $1 } END { print s + 0 }' "$f.errs") | $(median "$f.cpu") | $helper |"
	done
done
if ((${#RATIOS[@]} > 0)); then
	echo
	echo "| round | scenario | ours vs | ours/other throughput (≥ 0.80 vs no-op) | ours/other p99 (≤ 1.5 vs no-op) | targets |"
	echo "|---|---|---|---:|---:|---|"
	printf '%s\n' "${RATIOS[@]}"
	if ((ROUNDS > 1)); then
		for scen in "${SCENS[@]}"; do
			for name in "${NAMES[@]}"; do
				[[ -f "$TMP/ratio-$scen-$name.tput" ]] || continue
				ratio_row median "$scen" "$name" "$(median "$TMP/ratio-$scen-$name.tput")" "$(median "$TMP/ratio-$scen-$name.p99")"
				echo
			done
		done
	fi
fi
echo
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -z $TARGETS && $OURS == ratelimit ]]; then
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
