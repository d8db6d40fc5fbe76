-- wrk script of bench/run.py: POST one JSON body, with a bearer key if one is given, and print
-- a one-line JSON summary at the end.
--
--   wrk ... -s bench/post.lua URL -- '<json body>' [key]

function init(args)
  wrk.method = "POST"
  wrk.body = args[1]
  wrk.headers["Content-Type"] = "application/json"
  if args[2] ~= nil and args[2] ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. args[2]
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
