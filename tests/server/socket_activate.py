#!/usr/bin/env python3
"""A tiny stand-in for systemd's socket activation (the sd_listen_fds protocol).

usage: socket_activate.py KIND INFO_FILE RESPAWNS PROGRAM [ARGS...]

Makes what KIND names, keeps it open, and starts PROGRAM in a child with it
as fd 3 (fds 3 and 4 for `two`), LISTEN_FDS set to their count and LISTEN_PID
to the child's own pid (set in the child, before exec). KIND:
  tcp          a listening TCP socket on 127.0.0.1, a free port
  unix:PATH    a listening unix socket at PATH
  two          two listening TCP sockets
  udp          a datagram socket (not servable)
  connected    a connected TCP socket, as Accept=yes would pass (not servable)
  file         /dev/null (not a socket)
INFO_FILE gets the address ("http://127.0.0.1:PORT" or "unix:PATH") on its
first line, then each child's pid on a line of its own. When a child exits
and RESPAWNS is not used up, a new child is started 1 s later on the same
socket (as systemd restarts a service), so connections made meanwhile wait in
the socket's backlog. Exits with the last child's exit status."""
import fcntl
import os
import socket
import sys
import time


def make(kind):
    """(list of fds to pass, address, objects to keep open)."""
    if kind in ("tcp", "two"):
        socks = []
        for _ in range(2 if kind == "two" else 1):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(128)
            socks.append(s)
        return [s.fileno() for s in socks], "http://127.0.0.1:%d" % socks[0].getsockname()[1], socks
    if kind.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(kind[5:])
        s.listen(128)
        return [s.fileno()], kind, [s]
    if kind == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        return [s.fileno()], "udp", [s]
    if kind == "connected":
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        c = socket.create_connection(lst.getsockname())
        return [c.fileno()], "connected", [lst, c, lst.accept()[0]]
    if kind == "file":
        f = open("/dev/null")
        return [f.fileno()], "file", [f]
    sys.exit("unknown kind " + kind)


def spawn(fds, argv):
    pid = os.fork()
    if pid:
        return pid
    # Move the fds out of the way first, then onto 3, 4, ...: a source fd may itself be 3 or 4.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in fds]
    for i, fd in enumerate(high):
        os.dup2(fd, 3 + i)
        os.set_inheritable(3 + i, True)
        os.close(fd)
    os.environ["LISTEN_FDS"] = str(len(fds))
    os.environ["LISTEN_PID"] = str(os.getpid())
    try:
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def main():
    kind, info, respawns, argv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    fds, addr, keep = make(kind)
    with open(info, "w") as f:
        f.write(addr + "\n")
    while True:
        pid = spawn(fds, argv)
        with open(info, "a") as f:
            f.write("%d\n" % pid)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if respawns <= 0:
            sys.exit(status if status >= 0 else 128 - status)
        respawns -= 1
        time.sleep(1)


main()
