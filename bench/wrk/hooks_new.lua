-- bench/wrk/hooks_new.lua — every request a new webhook event:
--   X-Event-Id: <run prefix>-<thread id>-<per-thread counter>
-- with the signed 1 KB body (hooks_common.lua). The run prefix
-- (ONCE_BENCH_RUN, or time + random) keeps ids of different runs on one store
-- apart; the thread id keeps wrk's threads apart (each has its own Lua state
-- and counter). Paced when ONCE_BENCH_RATE is set (see hooks_common.lua).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local hooks = require("hooks_common")

-- setup() runs in the main Lua state, once per thread, before the run.
local next_id = 0
local prefix = hooks.run_prefix()
function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  thread:set("run_prefix", prefix)
end

-- Below: each thread's own state.
local body = hooks.body()
local headers = hooks.headers()
local counter = 0

function request()
  counter = counter + 1
  headers["X-Event-Id"] = run_prefix .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", nil, headers, body)
end

delay = hooks.pacer()
