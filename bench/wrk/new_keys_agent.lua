-- bench/wrk/new_keys_agent.lua — bench/wrk/new_keys.lua as an agent: every
-- request a new Idempotency-Key (<run prefix>-<thread id>-<counter>) and
-- `Authorization: Bearer $ONCE_BENCH_TOKEN`, so the request is that agent's
-- (its [agent.NAME] grants and limits apply). Used by bench/limit.sh.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

local next_id = 0
local prefix = common.run_prefix()
function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  thread:set("run_prefix", prefix)
end

local token = os.getenv("ONCE_BENCH_TOKEN")
if not token or token == "" then
  error("new_keys_agent.lua: set ONCE_BENCH_TOKEN to the agent's bearer token")
end
local body = common.body()
local counter = 0
local headers = {["Content-Type"] = "application/json", ["Idempotency-Key"] = "",
                 ["Authorization"] = "Bearer " .. token}

function request()
  counter = counter + 1
  headers["Idempotency-Key"] = run_prefix .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", nil, headers, body)
end
