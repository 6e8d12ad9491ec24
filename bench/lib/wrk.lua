-- wrk script of the benchmark (bench/lib/wrk.js): the request comes from the
-- environment, and done() prints one line of JSON that wrk.js parses.
--
--   BENCH_METHOD   GET, POST, ...
--   BENCH_BODY     request body (form), may be empty
--   BENCH_HEADERS  header lines "Name: value", separated by "\n"

wrk.method = os.getenv("BENCH_METHOD") or "GET"
local body = os.getenv("BENCH_BODY")
if body ~= nil and body ~= "" then wrk.body = body end
local headers = os.getenv("BENCH_HEADERS") or ""
for line in string.gmatch(headers, "[^\n]+") do
  local name, value = string.match(line, "^([^:]+):%s*(.*)$")
  if name then wrk.headers[name] = value end
end

done = function(summary, latency, requests)
  local e = summary.errors
  -- latency in microseconds; os.clock() is the CPU time wrk itself used
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"non2xx":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"mean_us":%.1f,"max_us":%d,"cpu_s":%.4f}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.mean, latency.max, os.clock()))
end
