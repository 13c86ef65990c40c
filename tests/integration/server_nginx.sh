#!/usr/bin/env bash
# nginx in front of latentd, with Debian's nginx on 127.0.0.1 and a free port
# (its own prefix, pid, logs and temp paths under the test directory):
# etc/nginx-latentd.conf and etc/nginx-latentd-scaleout.conf pass `nginx -t`
# (with a throwaway self-signed certificate); the scale-out file, its listen
# and server lines rewritten, in front of two latentd: a streamed completion
# comes through as events spread in time (not buffered), requests without an
# affinity key spread over both replicas, requests with one keep to one
# replica, SIGTERM to one replica during a run of requests costs no client an
# error (nginx moves on to the other), and the time to first token the proxy
# adds (direct vs through nginx in the same run; docs/deployment.md quotes it).
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
nclient=$root/tests/server/nginx_client.py
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "FAIL: nginx is not installed (make test-deps installs it)"; exit 1; }
command -v openssl >/dev/null || { echo "FAIL: openssl is not installed (make test-deps installs it)"; exit 1; }

ng=$tmp/nginx
mkdir -p "$ng"
# nginx's workers run as nobody when the master is root: let them through the test directory.
chmod 711 "$tmp" "$ng"
NGINX_PID=""
stop_nginx() {
    [ -n "$NGINX_PID" ] || return 0
    local kids i
    kids=$(ps -o pid= --ppid "$NGINX_PID" 2>/dev/null)
    kill -TERM "$NGINX_PID" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$NGINX_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$NGINX_PID" $kids 2>/dev/null
    wait "$NGINX_PID" 2>/dev/null
    NGINX_PID=""
}
trap 'stop_nginx; cleanup' EXIT

# main_conf SITE_FILE: an nginx.conf around a site file, everything under $ng.
main_conf() {
    cat <<EOF
daemon off;
worker_processes 1;
error_log $ng/error.log;
pid $ng/nginx.pid;
events { worker_connections 256; }
http {
    log_format latentd '\$status "\$http_x_session_affinity" "\$upstream_addr" "\$upstream_status" \$request_uri';
    access_log $ng/access.log latentd;
    client_body_temp_path $ng/body;
    proxy_temp_path $ng/proxy;
    fastcgi_temp_path $ng/fastcgi;
    uwsgi_temp_path $ng/uwsgi;
    scgi_temp_path $ng/scgi;
    include $1;
}
EOF
}

# --- nginx -t on the shipped files ------------------------------------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=llm.example.com \
    -keyout "$ng/key.pem" -out "$ng/cert.pem" >/dev/null 2>&1
for site in nginx-latentd.conf nginx-latentd-scaleout.conf; do
    sed -e "s|/etc/letsencrypt/live/llm.example.com/fullchain.pem|$ng/cert.pem|" \
        -e "s|/etc/letsencrypt/live/llm.example.com/privkey.pem|$ng/key.pem|" "$root/etc/$site" > "$ng/t-$site"
    main_conf "$ng/t-$site" > "$ng/t.conf"
    check "nginx -t: etc/$site ($("$NGINX" -v 2>&1 | sed 's|.*/||'))" bash -c "
        '$NGINX' -t -p '$ng/' -c '$ng/t.conf' -e '$ng/error.log' > '$ng/t.out' 2>&1; rc=\$?
        ! grep -q '\[warn\]\|\[emerg\]' '$ng/t.out' && [ \$rc = 0 ] || { cat '$ng/t.out'; false; }"
done

# --- two replicas behind the scale-out configuration --------------------------------------------
# A model that takes a few ms per token, so a stream lasts long enough to see it stream.
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/m" --kind t2mlr --seed 2 --d 384 --layers 8 --ffn 1024 >/dev/null
RFLAGS=(--kv-pool-mib 64 --threads 1 --max-connections-per-client 0)
start_server A "$tmp/m" "${RFLAGS[@]}" || exit 1
start_server B "$tmp/m" "${RFLAGS[@]}" || exit 1
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
N=http://127.0.0.1:$port
sed -e "s|listen 443 ssl http2;|listen 127.0.0.1:$port;|" -e '/ssl_certificate/d' \
    -e "s|127.0.0.1:8081|${URL_A#http://}|" -e "s|127.0.0.1:8082|${URL_B#http://}|" \
    "$root/etc/nginx-latentd-scaleout.conf" > "$ng/site.conf"
check "the scale-out file rewritten for the test (listen, no TLS, the two replicas twice)" bash -c "
    [ \$(grep -c 'listen 127.0.0.1:$port;' $ng/site.conf) = 1 ] && ! grep -v '^ *#' $ng/site.conf | grep -q ssl &&
    [ \$(grep -c 'server ${URL_A#http://} ' $ng/site.conf) = 2 ] && [ \$(grep -c 'server ${URL_B#http://} ' $ng/site.conf) = 2 ]"
main_conf "$ng/site.conf" > "$ng/nginx.conf"
"$NGINX" -p "$ng/" -c "$ng/nginx.conf" -e "$ng/error.log" > "$ng/stdout" 2>&1 &
NGINX_PID=$!
for i in $(seq 1 100); do curl -s -m 1 -o /dev/null "$N/health" && break; sleep 0.1; done
check "nginx up: /health through it" bash -c "curl -s -m 5 $N/health | grep -q '\"ok\"' || { cat $ng/error.log $ng/stdout; false; }"
check "/metrics is not served through the proxy" test "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$N/metrics")" = 403

check "streamed completion through nginx arrives event by event" "$PY" "$nclient" stream "$N"

# Requests without an affinity key: least_conn, both replicas get some.
M='latentd_requests_total{endpoint="/v1/completions",status="200"}'
a0=$(metric "$URL_A" "$M"); b0=$(metric "$URL_B" "$M")
for i in $(seq 1 20); do
    curl -s -m 30 -o /dev/null "$N/v1/completions" -d '{"prompt":"spread","max_tokens":2}'
done
a1=$(metric "$URL_A" "$M"); b1=$(metric "$URL_B" "$M")
check "20 requests without a key spread over both replicas (A +$((${a1:-0} - ${a0:-0})), B +$((${b1:-0} - ${b0:-0})))" \
    test $((${a1:-0} - ${a0:-0})) -ge 3 -a $((${b1:-0} - ${b0:-0})) -ge 3 -a $((${a1:-0} + ${b1:-0} - ${a0:-0} - ${b0:-0})) = 20
check "X-Session-Affinity keeps a conversation on one replica" "$PY" "$nclient" affinity "$N" 16 3 "$ng/access.log"

# Proxy overhead on time to first token (same machine, same run, interleaved).
# The whole line: docs/deployment.md quotes it.
if out=$("$PY" "$nclient" ttft 50 "$N" "$URL_A" "$URL_B" 2>&1); then
    ok "time to first token, direct vs through nginx"; printf '     %s\n' "$out"
else fail "time to first token, direct vs through nginx" "$out"; fi

# SIGTERM to B during a run of requests through nginx: nobody sees an error.
check "SIGTERM to one replica during 120 requests through nginx: no client error" "$PY" "$nclient" drain "$N" "$PID_B" 120
for i in $(seq 1 300); do kill -0 "$PID_B" 2>/dev/null || break; sleep 0.1; done
wait "$PID_B"; brc=$?
check "the drained replica exited 0" test "$brc" = 0
check "nginx passed requests from the draining replica on to the other (access log)" \
    grep -q "\"${URL_B#http://}, ${URL_A#http://}\"" "$ng/access.log"
check "after the drain every request goes to A" bash -c "
    [ \$(curl -s -m 30 -o /dev/null -w '%{http_code}' $N/v1/completions -d '{\"prompt\":\"after\",\"max_tokens\":2}') = 200 ] &&
    tail -n 1 $ng/access.log | grep -q '\"${URL_A#http://}\" \"200\"'"
check "nginx error log: no upstream errors reached a client" bash -c "! grep -q 'no live upstreams' $ng/error.log"

stop_nginx
stop_server A
check "replica A exits 0" test "$STOP_RC" = 0
finish
