-- bench/wrk/post.lua — a 1 KB JSON POST without Idempotency-Key (the direct
-- and nginx proxy_pass runs of bench/proxy.sh).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

wrk.method = "POST"
wrk.body = common.body()
wrk.headers["Content-Type"] = "application/json"
