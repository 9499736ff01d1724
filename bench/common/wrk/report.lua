-- Machine-readable summary for bench/http/run.sh.
-- wrk records latency in microseconds; percentile() returns microseconds.
-- Used directly for GET runs (`wrk -s report.lua URL`) and loaded by the
-- other scripts in this folder.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d rps=%.1f errors_connect=%d errors_read=%d " ..
    "errors_write=%d errors_status=%d errors_timeout=%d\n",
    summary.requests, summary.duration,
    summary.requests / (summary.duration / 1e6),
    e.connect, e.read, e.write, e.status, e.timeout))
  io.write(string.format(
    "BENCH p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f mean_us=%.2f min_us=%.1f max_us=%.1f\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.min, latency.max))
end
