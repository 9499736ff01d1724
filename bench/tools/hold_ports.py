#!/usr/bin/env python3
"""Stand-in for other programs that hold ports: listens on 127.0.0.1 on each port given,
accepts connections and closes them at once, until the process that started it exits
(or SIGTERM). `./test.sh` runs it when NETACCEL_TEST_HOLD_PORTS is set, to show that no
test or benchmark script depends on a fixed port being free.

Usage: bench/tools/hold_ports.py READY_FILE PORT...

Writes one line to READY_FILE once listening: the ports it holds, and those it could not
bind because another program already has them (those are taken anyway, which is all the
check needs).
"""

import os
import selectors
import socket
import sys


def main():
    ready, ports = sys.argv[1], sys.argv[2:]
    sel, held, elsewhere = selectors.DefaultSelector(), [], []
    for port in ports:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError:
            elsewhere.append(port)
            continue
        s.listen()
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        held.append(port)
    with open(ready, "w") as f:
        f.write(f"holding {' '.join(held) or 'none'}; already taken by other programs: "
                f"{' '.join(elsewhere) or 'none'}\n")
    # The parent's exit re-parents this process: stop then, so that a killed test run
    # leaves no listener behind.
    parent = os.getppid()
    while os.getppid() == parent:
        for key, _ in sel.select(1):
            try:
                key.fileobj.accept()[0].close()
            except OSError:
                pass


if __name__ == "__main__":
    main()
