-- wrk script of the benchmark (bench/lib/wrk.js): the request comes from the
-- environment, and done() prints one line of JSON that wrk.js parses.
--
--   BENCH_METHOD   GET, POST, ...
--   BENCH_BODY     request body (form), may be empty
--   BENCH_HEADERS  header lines "Name: value", separated by "\n"
--   BENCH_BODIES_FILE  optional: one request body per line, each sent once
--                  (one wrk thread), e.g. token requests each carrying a fresh
--                  client assertion. When they run out, the request goes to
--                  BENCH_SPENT_PATH instead (a path the server answers 404:
--                  counted as non-2xx, and no failed client authentication
--                  that could trip the server's brute-force limits), and
--                  done() reports how many were missing.
--   BENCH_LINE_HEADER  optional, with BENCH_BODIES_FILE: each line is the value
--                  of this header instead of a body (e.g. a DPoP proof per
--                  request; the name must be spelled as in BENCH_HEADERS).

wrk.method = os.getenv("BENCH_METHOD") or "GET"
local body = os.getenv("BENCH_BODY")
if body ~= nil and body ~= "" then wrk.body = body end
local headers = os.getenv("BENCH_HEADERS") or ""
for line in string.gmatch(headers, "[^\n]+") do
  local name, value = string.match(line, "^([^:]+):%s*(.*)$")
  if name then wrk.headers[name] = value end
end

local bodies_file = os.getenv("BENCH_BODIES_FILE")
if bodies_file ~= nil and bodies_file ~= "" then
  local threads = {}
  setup = function(thread) table.insert(threads, thread) end

  local spent_path = os.getenv("BENCH_SPENT_PATH") or "/bench-bodies-spent"
  local line_header = os.getenv("BENCH_LINE_HEADER")
  if line_header == "" then line_header = nil end
  local bodies, count, next_body, spent = {}, 0, 1, 0
  init = function(args)
    for line in io.lines(bodies_file) do
      if line ~= "" then count = count + 1; bodies[count] = line end
    end
    -- read by done() through the thread object
    wrk.thread:set("bodies_available", count)
    wrk.thread:set("bodies_missing", 0)
  end
  request = function()
    local b = bodies[next_body]
    if b == nil then
      spent = spent + 1
      wrk.thread:set("bodies_missing", spent)
      return wrk.format(nil, spent_path, nil, wrk.body)
    end
    bodies[next_body] = nil
    next_body = next_body + 1
    if line_header then
      wrk.headers[line_header] = b
      return wrk.format(nil, nil, nil, wrk.body)
    end
    return wrk.format(nil, nil, nil, b)
  end
  bodies_report = function()
    local available, missing = 0, 0
    for _, t in ipairs(threads) do
      available = available + (t:get("bodies_available") or 0)
      missing = missing + (t:get("bodies_missing") or 0)
    end
    return string.format(',"bodies_available":%d,"bodies_missing":%d', available, missing)
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  -- latency in microseconds; os.clock() is the CPU time wrk itself used
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"non2xx":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"mean_us":%.1f,"max_us":%d,"cpu_s":%.4f%s}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.mean, latency.max, os.clock(),
    bodies_report and bodies_report() or ""))
end
