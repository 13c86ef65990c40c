#!/usr/bin/env bash
# latentd on a listening socket passed by its parent (systemd socket
# activation, the sd_listen_fds protocol: fd 3, LISTEN_PID, LISTEN_FDS):
# under systemd-socket-activate when it is installed, and under
# tests/server/socket_activate.py (the same protocol in a few lines of
# Python). The passed socket is served and host/port/unix are ignored; a
# connection made while latentd restarts waits in the socket's backlog and is
# answered by the next process; a passed unix socket is not removed at exit;
# variables meant for another pid are ignored; sockets latentd cannot serve
# are refused at start with a message. Everything on 127.0.0.1.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
"$root/tests/make_test_model.sh" "$tmp/m" t2mlr >/dev/null
model=$tmp/m
activate=$root/tests/server/socket_activate.py
FLAGS=(--model "$model" --kv-pool-mib 64)

# The launchers' children (the latentd processes) die with the launchers.
kill_children() {
    local f p
    for f in "$tmp"/*.info; do
        [ -f "$f" ] || continue
        for p in $(tail -n +2 "$f"); do kill -KILL "$p" 2>/dev/null; done
    done
}
trap 'kill_children; cleanup' EXIT

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# hcurl ADDR PATH [curl args...]: ADDR is http://HOST:PORT or unix:PATH.
hcurl() {
    local a=$1 p=$2; shift 2
    case $a in
        unix:*) curl -s -m 30 --unix-socket "${a#unix:}" "http://latentd$p" "$@" ;;
        *) curl -s -m 30 "$a$p" "$@" ;;
    esac
}
# wait_health ADDR: /health 200 within 30 s (the first connection may start latentd).
wait_health() {
    local i
    for i in $(seq 1 150); do
        [ "$(hcurl "$1" /health -m 2 -o /dev/null -w '%{http_code}')" = 200 ] && return 0
        sleep 0.2
    done
    echo "no 200 from $1/health"; return 1
}
completion_ok() { hcurl "$1" /v1/completions -d '{"prompt":"hello","max_tokens":4}' | grep -q '"text_completion"'; }
stream_ok() {
    hcurl "$1" /v1/completions -N -d '{"prompt":"hello","max_tokens":4,"stream":true}' > "$tmp/stream" &&
        grep -q '^data: {"id":"cmpl-' "$tmp/stream" && grep -q '^data: \[DONE\]' "$tmp/stream"
}
# info_line FILE N: line N of a launcher's info file, waiting up to 10 s for it.
info_line() {
    local i
    for i in $(seq 1 100); do
        [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && { sed -n "${2}p" "$1"; return 0; }
        sleep 0.1
    done
    return 1
}
# wait_gone PID: up to 30 s.
wait_gone() { local i; for i in $(seq 1 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; return 1; }

# --- systemd-socket-activate -----------------------------------------------------------------
# --host 192.0.2.1 --port 1 cannot be bound here: only the passed socket can serve.
if command -v systemd-socket-activate >/dev/null; then
    port=$(free_port)
    systemd-socket-activate -l "127.0.0.1:$port" "$latentd" "${FLAGS[@]}" --host 192.0.2.1 --port 1 > "$tmp/sd.log" 2>&1 &
    sdpid=$!
    SERVER_PIDS+=("$sdpid")
    U=http://127.0.0.1:$port
    for i in $(seq 1 50); do grep -q "Listening on" "$tmp/sd.log" && break; sleep 0.1; done
    check "systemd-socket-activate: the first connection starts latentd, /health 200" wait_health "$U"
    check "systemd-socket-activate: the log names the passed socket" bash -c "grep -q 'socket activation: serving the socket passed as fd 3' $tmp/sd.log &&
        grep -q 'latentd listening on $U ' $tmp/sd.log || { cat $tmp/sd.log; false; }"
    check "systemd-socket-activate: completion" completion_ok "$U"
    check "systemd-socket-activate: streamed completion" stream_ok "$U"
    kill -TERM "$sdpid"  # systemd-socket-activate exec'd latentd: same pid
    wait_gone "$sdpid"; wait "$sdpid"; rc=$?
    check "systemd-socket-activate: SIGTERM, exit 0" test "$rc" = 0
else
    echo "skip systemd-socket-activate is not installed (package systemd): the Python launcher only"
fi

# --- the Python launcher: TCP, and a restart on the same socket --------------------------------------
"$PY" "$activate" tcp "$tmp/tcp.info" 1 "$latentd" "${FLAGS[@]}" --host 192.0.2.1 --port 1 > "$tmp/tcp.log" 2>&1 &
lpid=$!
SERVER_PIDS+=("$lpid")
U=$(info_line "$tmp/tcp.info" 1); first=$(info_line "$tmp/tcp.info" 2)
check "launcher: /health 200 on the passed TCP socket" wait_health "$U"
check "launcher: completion" completion_ok "$U"
check "launcher: streamed completion" stream_ok "$U"
kill -TERM "$first"
check "launcher: first latentd drains and exits" wait_gone "$first"
# No latentd now for 1 s; the socket stays open in the launcher (as in systemd).
read -r code secs < <(hcurl "$U" /v1/models -o "$tmp/models" -w '%{http_code} %{time_total}\n')
second=$(info_line "$tmp/tcp.info" 3)
check "a request sent between two latentd processes waits in the backlog, then 200 from the next one" bash -c "
    [ '$code' = 200 ] && grep -q '\"object\":\"list\"' $tmp/models && [ -n '$second' ] && [ '$second' != '$first' ] &&
    awk 'BEGIN { exit !($secs >= 0.3) }' || { echo 'status $code after $secs s, second pid $second'; false; }"
serves() { wait_health "$1" && completion_ok "$1"; }
check "the second latentd serves completions" serves "$U"
kill -TERM "$second"
wait_gone "$lpid"; wait "$lpid"; rc=$?
check "launcher: second latentd exits 0 on SIGTERM" test "$rc" = 0

# --- a passed unix socket: served, and left in place at exit (it is the socket unit's) ---------------
"$PY" "$activate" "unix:$tmp/sa.sock" "$tmp/unix.info" 0 "$latentd" "${FLAGS[@]}" --unix "$tmp/sa.sock" > "$tmp/unix.log" 2>&1 &
lpid=$!
SERVER_PIDS+=("$lpid")
A=$(info_line "$tmp/unix.info" 1)
check "unix socket passed: /health 200 and a completion" serves "$A"
check "unix socket passed: the log names it" grep -q "latentd listening on unix:$tmp/sa.sock " "$tmp/unix.log"
kill -TERM "$(info_line "$tmp/unix.info" 2)"
wait_gone "$lpid"; wait "$lpid"; rc=$?
check "unix socket passed: exit 0, the socket file is still there" bash -c "[ $rc = 0 ] && [ -S $tmp/sa.sock ]"

# --- LISTEN_PID of another process: latentd listens by itself ----------------------------------------
LISTEN_PID=1 LISTEN_FDS=1 start_server O "$model" --kv-pool-mib 64 || exit 1
own_socket() { completion_ok "$URL_O" && ! grep -q 'socket activation' "$LOG_O"; }
check "LISTEN_PID not ours: ignored, own socket on --port 0" own_socket
stop_server O

# --- what latentd cannot serve is refused at start ----------------------------------------------------
refused() { # KIND MESSAGE
    timeout 30 "$PY" "$activate" "$1" "$tmp/r-$1.info" 0 "$latentd" "${FLAGS[@]}" > "$tmp/r-$1.log" 2>&1
    local rc=$?
    [ "$rc" = 1 ] && grep -q "$2" "$tmp/r-$1.log" || { echo "exit $rc"; cat "$tmp/r-$1.log"; false; }
}
check "refused: a datagram socket" refused udp "fd 3 is not a stream socket"
check "refused: a connected socket (Accept=yes)" refused connected "fd 3 is not a listening socket"
check "refused: not a socket" refused file "fd 3 is not a socket"
check "refused: two sockets" refused two "2 sockets passed"

finish
