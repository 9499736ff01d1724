-- POST a 64-byte body (lower-case letters) to the path given on the wrk
-- command line (bench/http/run.sh uses /v1/fn/to_uppercase).
wrk.method = "POST"
wrk.body = string.rep("abcdefghijklmnop", 4)
wrk.headers["Content-Type"] = "application/octet-stream"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")
