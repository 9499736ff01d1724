module netaccel.dev/bench/clients

go 1.22

require netaccel.dev/client v0.0.0

replace netaccel.dev/client => ../../../clients/go
