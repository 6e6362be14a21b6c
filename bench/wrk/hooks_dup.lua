-- bench/wrk/hooks_dup.lua — every request the same webhook event
-- (X-Event-Id: ONCE_BENCH_EVENT_ID) with the signed 1 KB body
-- (hooks_common.lua), so the gateway checks the signature, finds the event
-- stored and answers {"status":"duplicate"}. bench/hooks.sh sends the first
-- delivery of that event (with curl) before wrk starts. Paced when
-- ONCE_BENCH_RATE is set (see hooks_common.lua).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local hooks = require("hooks_common")

local id = os.getenv("ONCE_BENCH_EVENT_ID")
if not id or id == "" then
  error("hooks_dup.lua: set ONCE_BENCH_EVENT_ID to the id of the event sent before the run")
end

local headers = hooks.headers()
headers["X-Event-Id"] = id
wrk.method = "POST"
wrk.body = hooks.body()
wrk.headers = headers

delay = hooks.pacer()
