module netaccel.dev/client

go 1.22
