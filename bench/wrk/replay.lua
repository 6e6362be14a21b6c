-- bench/wrk/replay.lua — every request the same Idempotency-Key
-- (ONCE_BENCH_KEY) and the same 1 KB JSON body, so once answers each from its
-- ledger (Once-Outcome: replayed). bench/proxy.sh sends the warm-up request
-- that records the answer (with curl) before wrk starts.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

local key = os.getenv("ONCE_BENCH_KEY")
if not key or key == "" then
  error("replay.lua: set ONCE_BENCH_KEY to the key of the warm-up request")
end

wrk.method = "POST"
wrk.body = common.body()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = key
