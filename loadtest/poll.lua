-- poll.lua: the status storm of loadtest/status.sh: GET of one path (LT_PATH) over and over on
-- every connection, with If-None-Match: LT_ETAG when that is set (the 304 run). The same script
-- polls the bare handler (loadtest/bare_handler.c), so both sides pay wrk the same per answer.
-- Env: LT_PATH (/), LT_ETAG (none). done() prints one line:
--   RESULT answered=.. s200=.. s304=.. other=.. rate=.. p50_us=.. p99_us=.. sock_connect=..
--          sock_read=.. sock_write=.. sock_timeout=..
-- rate = (200 + 304 answers) / wrk's run time: no drain here, a read changes nothing.
local path = os.getenv("LT_PATH") or "/"
local etag = os.getenv("LT_ETAG")
local req
local threads = {}

poll_counts = { s200 = 0, s304 = 0, other = 0 }

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local headers = {}
  if etag and etag ~= "" then headers["If-None-Match"] = etag end
  req = wrk.format("GET", path, headers)
end

function request()
  return req
end

function response(status, headers, body)
  if status == 200 then
    poll_counts.s200 = poll_counts.s200 + 1
  elseif status == 304 then
    poll_counts.s304 = poll_counts.s304 + 1
  else
    poll_counts.other = poll_counts.other + 1
  end
end

function done(summary, latency, requests)
  local t = { s200 = 0, s304 = 0, other = 0 }
  for _, th in ipairs(threads) do
    local c = th:get("poll_counts") or {}
    for k, _ in pairs(t) do t[k] = t[k] + (tonumber(c[k]) or 0) end
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT answered=%d s200=%d s304=%d other=%d rate=%.1f p50_us=%d p99_us=%d " ..
    "sock_connect=%d sock_read=%d sock_write=%d sock_timeout=%d\n",
    t.s200 + t.s304 + t.other, t.s200, t.s304, t.other,
    (t.s200 + t.s304) / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.timeout))
end
