-- queue.lua: the waiting room's joins and place polls for loadtest/queue.sh's throughput runs
-- (issue 32). Every request carries its user in the trusted proxy's header (LT_HEADER), as
-- nginx's clients would: LT_MODE=join POSTs .../queue for a new user each time (w<run>-<thread>-<n>:
-- a new place per request), LT_MODE=poll GETs .../queue for a user drawn at random from
-- LT_PREFIX0 .. LT_PREFIX<LT_USERS-1> (places joined beforehand). No drain: a join that wrk
-- cuts off only adds a place nobody counts, and a poll changes nothing.
-- Env: LT_SKU, LT_MODE (join|poll), LT_HEADER (X-User-Id), LT_PREFIX (p), LT_USERS (1000),
-- LT_RUN (a tag keeping the join users of two runs apart). done() prints one line:
--   RESULT answered=.. s200=.. s201=.. other=.. rate=.. p50_us=.. p99_us=.. sock_connect=..
--          sock_read=.. sock_write=.. sock_timeout=..
-- rate = 2xx answers / wrk's run time.
local sku = os.getenv("LT_SKU") or "q"
local mode = os.getenv("LT_MODE") or "poll"
local hdr = os.getenv("LT_HEADER") or "X-User-Id"
local prefix = os.getenv("LT_PREFIX") or "p"
local nusers = tonumber(os.getenv("LT_USERS") or "1000")
local run = os.getenv("LT_RUN") or "0"
local path = "/api/v1/skus/" .. sku .. "/queue"
local threads = {}
tid = 0 -- set per thread by setup() (thread:set)
local n = 0

queue_counts = { s200 = 0, s201 = 0, other = 0 }

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  math.randomseed(os.time() * 100 + tid)
end

function request()
  n = n + 1
  local h = {}
  if mode == "join" then
    h[hdr] = "w" .. run .. "-" .. tid .. "-" .. n
    h["Content-Length"] = "0"
    return wrk.format("POST", path, h)
  end
  h[hdr] = prefix .. math.random(0, nusers - 1)
  return wrk.format("GET", path, h)
end

function response(status, headers, body)
  if status == 200 then
    queue_counts.s200 = queue_counts.s200 + 1
  elseif status == 201 then
    queue_counts.s201 = queue_counts.s201 + 1
  else
    queue_counts.other = queue_counts.other + 1
  end
end

function done(summary, latency, requests)
  local t = { s200 = 0, s201 = 0, other = 0 }
  for _, th in ipairs(threads) do
    local c = th:get("queue_counts") or {}
    for k, _ in pairs(t) do t[k] = t[k] + (tonumber(c[k]) or 0) end
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT answered=%d s200=%d s201=%d other=%d rate=%.1f p50_us=%d p99_us=%d " ..
    "sock_connect=%d sock_read=%d sock_write=%d sock_timeout=%d\n",
    t.s200 + t.s201 + t.other, t.s200, t.s201, t.other,
    (t.s200 + t.s201) / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.timeout))
end
