-- wrk's summary of a run, as one line the peers benchmark parses
-- (peers_test.go): requests completed, run time in µs, non-2xx/3xx answers,
-- socket errors, and the p50 and p99 latency in µs.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK-REPORT requests=%d duration_us=%d status=%d connect=%d read=%d write=%d timeout=%d p50_us=%.0f p99_us=%.0f\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
