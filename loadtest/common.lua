-- common.lua: shared by the wrk scripts of loadtest/ (order.lua, status.lua, ceiling.lua).
--
-- Each wrk thread counts what it sent and what came back; done() sums the threads (thread:get)
-- and prints one machine-readable line:
--   RESULT created=.. units=.. s200=.. s204=.. s409=.. s503=.. s503_unknown=.. s4xx=.. s5xx=..
--          other=..
--          bad_body=.. sent_orders=.. sent_reads=.. answered=.. unanswered=.. window_s=..
--          rate=.. all_rate=.. p50_us=.. p90_us=.. p99_us=.. p999_us=.. max_us=..
--          sock_connect=.. sock_read=.. sock_write=.. sock_timeout=..
-- created = 201 answers, units = the sum of "quantity" in their bodies (not what was asked).
--
-- The measured window: a thread sends real requests for LT_WINDOW_S seconds (from its first
-- request), then "drains": each connection's next request is an incomplete HTTP request (no
-- blank line after the headers), which no server answers and which therefore changes nothing.
-- So when wrk stops (its -d is the window plus a drain time longer than any order can take)
-- every order request has had its answer, and the 201 units counted here can be compared with
-- what Redis holds *exactly* ("once no request is in flight", SPEC §8). Requests still
-- unanswered at the end (socket errors, an order slower than the drain) are reported as
-- `unanswered` and the verifier then checks bounds instead of equality.
--
-- rate = answers of the scenario's "successful" status (LT_OK: 201, 409 or 2xx) that arrived
-- inside the window, divided by the window; the latency percentiles cover every answer.

local M = {}

local ffi_ok, ffi = pcall(require, "ffi")
local now
if ffi_ok then
  pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } lt_timespec;
    int clock_gettime(int clk, lt_timespec *ts);
  ]])
  local ts = ffi.new("lt_timespec")
  now = function()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
  end
else
  now = os.time -- plain Lua: one-second resolution, still correct for the drain
end
M.now = now

M.window = tonumber(os.getenv("LT_WINDOW_S") or "10")
-- which answers count towards `rate`: "201" (orders), "409" (sold-out flood), "2xx" (ceilings)
M.ok_kind = os.getenv("LT_OK") or "201"
M.drain_request = "GET /lt-drain HTTP/1.1\r\nHost: loadtest\r\nX-Drain: 1\r\n"
-- When set, a thread that has every answer after the window writes LT_DRAIN_DIR/thread-<n>, so
-- run.sh can stop wrk (SIGINT) as soon as all threads have drained instead of waiting out -d.
M.drain_dir = os.getenv("LT_DRAIN_DIR")

local counter_names = {
  "created", "units", "s200", "s204", "s409", "s503", "s503_unknown", "s4xx", "s5xx", "other",
  "sent_orders", "sent_reads", "answered", "ok_in_window", "bad_body",
}
M.counter_names = counter_names

-- Per-thread counters. A global, because done() reads each thread's globals with thread:get.
lt_counters = {}
local c = lt_counters
for _, n in ipairs(counter_names) do c[n] = 0 end
M.c = c
local t_start, t_end

-- wrk calls request() once in the first thread's state before the run, only to see how many
-- requests the returned text holds (script_verify_request). setup() numbers the threads so that
-- call is neither counted nor allowed to start the window.
local verify_pending = nil

-- Returns false for wrk's verification call (see above): the caller sends its normal request
-- and counts nothing.
function M.real_call()
  if verify_pending == nil then verify_pending = (lt_thread_index == 1) end
  if verify_pending then
    verify_pending = false
    return false
  end
  return true
end

local drained_marked = false

-- After the window: once this thread has an answer for everything it sent, leave the marker.
function M.check_drained()
  if drained_marked or not M.drain_dir then return end
  if c.sent_orders + c.sent_reads <= c.answered then
    drained_marked = true
    local f = io.open(M.drain_dir .. "/thread-" .. tostring(lt_thread_index), "w")
    if f then
      f:write("drained\n")
      f:close()
    end
  end
end

-- The request a connection sends once the window is closed (see the top of this file).
function M.drain()
  M.check_drained()
  return M.drain_request
end

-- Returns true while the window is open (and starts it on the first call).
function M.in_window()
  local t = now()
  if not t_start then
    t_start = t
    t_end = t + M.window
  end
  return t < t_end
end

-- Counts one answer: its status class, and for a 201 the units its body reports.
function M.count(status, body)
  c.answered = c.answered + 1
  if status == 201 then
    c.created = c.created + 1
    local q = body and body:match('"quantity":(%d+)')
    if q then c.units = c.units + tonumber(q) else c.bad_body = c.bad_body + 1 end
  elseif status == 200 then
    c.s200 = c.s200 + 1
  elseif status == 204 then
    c.s204 = c.s204 + 1
  elseif status == 409 then
    c.s409 = c.s409 + 1
  elseif status == 503 then
    c.s503 = c.s503 + 1
    -- the commit's outcome is unknown (Redis failed during it): the order may have been placed
    if body and body:find('"outcome":"unknown"', 1, true) then
      c.s503_unknown = c.s503_unknown + 1
    end
  elseif status >= 400 and status < 500 then
    c.s4xx = c.s4xx + 1
  elseif status >= 500 then
    c.s5xx = c.s5xx + 1
  else
    c.other = c.other + 1
  end
  if t_end and now() >= t_end then
    M.check_drained()
  elseif t_end then
    local k = M.ok_kind
    if (k == "201" and status == 201) or (k == "409" and status == 409)
        or (k == "2xx" and status >= 200 and status < 300) then
      c.ok_in_window = c.ok_in_window + 1
    end
  end
end

-- wrk hooks shared by every script ---------------------------------------------------------

local threads = {}

function M.setup(thread)
  table.insert(threads, thread)
  thread:set("lt_thread_index", #threads)
end

function M.done(summary, latency, requests)
  local tot = {}
  for _, n in ipairs(counter_names) do tot[n] = 0 end
  for _, t in ipairs(threads) do
    local tc = t:get("lt_counters") or {}
    for _, n in ipairs(counter_names) do tot[n] = tot[n] + (tonumber(tc[n]) or 0) end
  end
  local answered = tot.answered
  local unanswered = tot.sent_orders + tot.sent_reads - answered
  if unanswered < 0 then unanswered = 0 end
  local e = summary.errors
  local out = {
    string.format("created=%d", tot.created),
    string.format("units=%d", tot.units),
    string.format("s200=%d", tot.s200),
    string.format("s204=%d", tot.s204),
    string.format("s409=%d", tot.s409),
    string.format("s503=%d", tot.s503),
    string.format("s503_unknown=%d", tot.s503_unknown),
    string.format("s4xx=%d", tot.s4xx),
    string.format("s5xx=%d", tot.s5xx),
    string.format("other=%d", tot.other),
    string.format("bad_body=%d", tot.bad_body),
    string.format("sent_orders=%d", tot.sent_orders),
    string.format("sent_reads=%d", tot.sent_reads),
    string.format("answered=%d", answered),
    string.format("unanswered=%d", unanswered),
    string.format("window_s=%.3f", M.window),
    string.format("rate=%.1f", tot.ok_in_window / M.window),
    string.format("all_rate=%.1f", answered / (summary.duration / 1e6)),
    string.format("p50_us=%d", latency:percentile(50)),
    string.format("p90_us=%d", latency:percentile(90)),
    string.format("p99_us=%d", latency:percentile(99)),
    string.format("p999_us=%d", latency:percentile(99.9)),
    string.format("max_us=%d", latency.max),
    string.format("sock_connect=%d", e.connect),
    string.format("sock_read=%d", e.read),
    string.format("sock_write=%d", e.write),
    string.format("sock_timeout=%d", e.timeout),
  }
  io.write("RESULT ", table.concat(out, " "), "\n")
end

return M
