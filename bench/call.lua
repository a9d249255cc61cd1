-- wrk script for bench/wrk.py: POST one JSON-RPC message, the same body on
-- every request but for its id (a counter, as a real client numbers its
-- requests), and print a JSON summary line that wrk.py reads.
--   BENCH_BODY     path of the request body (a tools/call message)
--   BENCH_HEADERS  extra headers, one "Name: value" per line (the legacy
--                  paths' Mcp-Session-Id, the gateway's MCP-Protocol-Version,
--                  Mcp-Method and Mcp-Name)
--   BENCH_CREDENTIALS  N > 0: each request carries "Authorization: Bearer
--                  bench-<k>", k turning over 0..N-1 request by request (N
--                  callers with credentials of their own; unset or 0: none)
local file = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
-- A distinct id per request: with the same id on every request, the mcp 1.x
-- server (one session, several requests in flight) routes each answer to the
-- latest stream registered under that id, and the measured server does less
-- work than it does for a client whose ids differ (bench/JOURNAL.md).
-- BENCH_SAME_ID=1 keeps the one id (what this script did before; a row of
-- bench/wrk.py shows the difference).
local prefix, suffix = wrk.body:match('^(.-"id":)1(,.*)$')
if os.getenv("BENCH_SAME_ID") == "1" then
  prefix = nil
end
local credentials = tonumber(os.getenv("BENCH_CREDENTIALS") or "0") or 0
-- One header table per credential, made at the first request (after the
-- BENCH_HEADERS lines below are in wrk.headers).
local tables = nil
local function headers_for(counter)
  if credentials <= 0 then
    return nil
  end
  if tables == nil then
    tables = {}
    for k = 0, credentials - 1 do
      local t = {}
      for name, value in pairs(wrk.headers) do
        t[name] = value
      end
      t["Authorization"] = "Bearer bench-" .. k
      tables[k] = t
    end
  end
  return tables[counter % credentials]
end
if prefix or credentials > 0 then
  local counter = 0
  request = function()
    counter = counter + 1
    local body = prefix and (prefix .. counter .. suffix) or nil
    return wrk.format(nil, nil, headers_for(counter), body)
  end
end
for line in (os.getenv("BENCH_HEADERS") or ""):gmatch("[^\n]+") do
  local name, value = line:match("^([^:]+):%s*(.-)%s*$")
  if name then
    wrk.headers[name] = value
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, '
      .. '"p90_us": %d, "p999_us": %d, "max_us": %d, "non2xx": %d, "connect": %d, "read": %d, "write": %d, "timeout": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency:percentile(90), latency:percentile(99.9), latency.max, e.status, e.connect, e.read, e.write, e.timeout))
end
