-- bench/wrk/new_keys.lua — every request a new Idempotency-Key:
--   <run prefix>-<thread id>-<per-thread counter>
-- The run prefix (ONCE_BENCH_RUN, or time + random) keeps keys of different
-- runs on one store apart; the thread id keeps wrk's threads apart (each has
-- its own Lua state and its own counter). Body: 1 KB JSON POST.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

-- setup() runs in the main Lua state, once per thread, before the run.
-- It sets the globals tid and run_prefix in each thread's state.
local next_id = 0
local prefix = common.run_prefix()
function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  thread:set("run_prefix", prefix)
end

-- Below: each thread's own state.
local body = common.body()
local counter = 0
local headers = {["Content-Type"] = "application/json", ["Idempotency-Key"] = ""}

function request()
  counter = counter + 1
  headers["Idempotency-Key"] = run_prefix .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", nil, headers, body)
end
