-- bench/wrk/common.lua — shared by the wrk scripts of bench/proxy.sh.
--
-- The request body: the file named by ONCE_BENCH_BODY (bench/proxy.sh writes
-- it, so curl's warm-up and wrk send the very same bytes), else 1024 bytes of
-- JSON made here. Content-Type is application/json.
local M = {}

function M.body()
  local path = os.getenv("ONCE_BENCH_BODY")
  if path and path ~= "" then
    local f = io.open(path, "rb")
    if f then
      local b = f:read("*a")
      f:close()
      if b and #b > 0 then return b end
    end
  end
  -- {"data":"xxxx…"} padded to exactly 1024 bytes
  local head, tail = '{"data":"', '"}'
  return head .. string.rep("x", 1024 - #head - #tail) .. tail
end

-- A prefix no earlier run used: ONCE_BENCH_RUN when given, else time + random.
function M.run_prefix()
  local p = os.getenv("ONCE_BENCH_RUN")
  if p and p ~= "" then return p end
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
  return string.format("r%x%06x", os.time(), math.random(0, 0xffffff))
end

return M
