-- POST a 64-byte to_uppercase call in the Open Inference Protocol v2 with the binary
-- tensor data extension (the JSON head, then the 64 raw bytes; binary output), to
-- the path on the wrk command line (bench/v2/run.sh uses /v2/models/to_uppercase/infer).
-- Same 64 payload bytes as post64.lua, so the two runs differ only in the encoding.
local json = '{"inputs":[{"name":"INPUT0","shape":[64],"datatype":"UINT8",' ..
  '"parameters":{"binary_data_size":64}}],' ..
  '"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}'
wrk.method = "POST"
wrk.body = json .. string.rep("abcdefghijklmnop", 4)
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = tostring(#json)

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")
