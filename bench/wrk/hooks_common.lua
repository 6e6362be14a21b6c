-- bench/wrk/hooks_common.lua — shared by the webhook scripts of bench/hooks.sh
-- (hooks_new.lua, hooks_dup.lua).
--
-- Every request is a webhook with the 1 KB JSON body of common.lua
-- (ONCE_BENCH_BODY) and an event id in X-Event-Id, to a source with
-- verify = none (bench/hooks.sh says why it is not a signed one).
--
-- Pacing (ONCE_BENCH_RATE > 0, total requests/s over all wrk threads;
-- ONCE_BENCH_THREADS = wrk -t): wrk cannot pace by itself, so delay() is
-- defined and wrk waits that many ms before each request of a connection.
-- Each thread sends at RATE / THREADS per second on a fixed schedule: a
-- request takes the next free slot (slots 1000 * THREADS / RATE ms apart) and
-- waits until it. When every connection is busy the schedule is not caught
-- up afterwards (no burst); the achieved rate is what wrk reports. The clock
-- is clock_gettime(CLOCK_MONOTONIC) through LuaJIT's ffi; without ffi each
-- request waits a fixed CONNECTIONS / RATE s (ONCE_BENCH_CONNECTIONS), which
-- falls short of RATE by the response time.
-- wrk records latency from the moment a request is written, so the delay is
-- not part of it.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

local M = {}

M.body = common.body
M.run_prefix = common.run_prefix

function M.headers()
  return {["Content-Type"] = "application/json", ["X-Event-Id"] = ""}
end

-- Returns a delay() for wrk, or nil when ONCE_BENCH_RATE is unset or 0.
function M.pacer()
  local rate = tonumber(os.getenv("ONCE_BENCH_RATE") or "") or 0
  if rate <= 0 then return nil end
  local threads = tonumber(os.getenv("ONCE_BENCH_THREADS") or "") or 1
  local ok, ffi = pcall(require, "ffi")
  if not ok then
    local conns = tonumber(os.getenv("ONCE_BENCH_CONNECTIONS") or "") or 1
    local fixed = 1000 * conns / rate
    return function() return fixed end
  end
  ffi.cdef([[
    typedef struct { long tv_sec; long tv_nsec; } once_bench_ts;
    int clock_gettime(int clk, once_bench_ts *ts);
  ]])
  local ts = ffi.new("once_bench_ts")
  local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local interval = 1000 * threads / rate
  local next_slot = 0
  return function()
    local t = now_ms()
    if next_slot < t then next_slot = t end
    local d = next_slot - t
    next_slot = next_slot + interval
    return d -- wrk truncates to whole ms
  end
end

return M
