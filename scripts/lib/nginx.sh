# shellcheck shell=bash
#
# scripts/lib/nginx.sh: nginx as examples/nginx/shape_sync.conf documents it, for the tests and
# benchmarks that put it in front of shape_sync (test/integration/nginx_proxy.sh,
# bench/proxy.sh). The documented file is used as it is: only its addresses, ports, paths and
# secret are replaced, each of which must appear exactly once, so that a change to the file
# that these replacements no longer fit fails loudly instead of testing something else.
#
#   nginx_start DIR SHAPE_SYNC_PORT APP_PORT SECRET TLS_PORT [PLAIN_PORT]
#       writes DIR/nginx.conf (a self-signed certificate for localhost, the cache and temp
#       files in DIR, a worker per CPU, each with as many connections as the open-file limit
#       it starts with allows; PLAIN_PORT adds a plain HTTP/1.1 listener beside TLS, for load
#       generators that do not speak TLS) and starts nginx; fails with a message on stderr
#   nginx_stop DIR
#
# As root, nginx's workers run as nobody: DIR is made readable to them. NGINX_ACCESS_LOG="PATH
# timed" logs each request's end, duration, status, cache status and request line.

# _nginx_replace FILE FROM TO: FROM, which FILE holds exactly once, becomes TO
_nginx_replace() {
	local n
	n=$(grep -cF -- "$2" "$1" || true)
	if [[ $n != 1 ]]; then
		echo "nginx.sh: examples/nginx/shape_sync.conf names '$2' $n times, not once" >&2
		return 1
	fi
	FROM=$2 TO=$3 python3 -c 'import os, sys
p = sys.argv[1]
s = open(p).read().replace(os.environ["FROM"], os.environ["TO"])
open(p, "w").write(s)' "$1"
}

nginx_start() {
	local dir=$1 shape_sync_port=$2 app_port=$3 secret=$4 tls_port=$5 plain_port=${6:-}
	local conf=$dir/shape_sync.conf listen
	local src
	src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/examples/nginx/shape_sync.conf
	mkdir -p "$dir/cache" "$dir/tmp"
	chmod 755 "$dir"
	chmod 777 "$dir/cache" "$dir/tmp"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
		-keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null || return 1
	cp "$src" "$conf"
	listen="listen 127.0.0.1:$tls_port ssl http2;"
	if [[ -n $plain_port ]]; then
		listen+=" listen 127.0.0.1:$plain_port;"
	fi
	_nginx_replace "$conf" /var/cache/nginx/shape_sync "$dir/cache" &&
		_nginx_replace "$conf" "server 127.0.0.1:3000;" "server 127.0.0.1:$shape_sync_port;" &&
		_nginx_replace "$conf" "server 127.0.0.1:8000;" "server 127.0.0.1:$app_port;" &&
		_nginx_replace "$conf" 'set $shape_sync_secret "change-me";' "set \$shape_sync_secret \"$secret\";" &&
		_nginx_replace "$conf" "listen 443 ssl http2;" "$listen" &&
		_nginx_replace "$conf" "server_name sync.example.com;" "server_name localhost;" &&
		_nginx_replace "$conf" /etc/ssl/certs/sync.example.com.pem "$dir/cert.pem" &&
		_nginx_replace "$conf" /etc/ssl/private/sync.example.com.key "$dir/key.pem" || return 1
	{
		if [[ $(id -u) -eq 0 ]]; then
			echo 'user nobody nogroup;'
			chmod 644 "$dir/key.pem"
		fi
		cat <<CONF
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 16384; }
http {
    log_format timed '\$msec \$request_time \$status \$upstream_cache_status "\$request"';
    access_log ${NGINX_ACCESS_LOG:-off};
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    include $conf;
}
CONF
	} >"$dir/nginx.conf"
	if ! nginx -t -q -p "$dir" -c "$dir/nginx.conf"; then
		echo "nginx.sh: nginx refuses $dir/nginx.conf" >&2
		return 1
	fi
	nginx -p "$dir" -c "$dir/nginx.conf"
}

nginx_stop() {
	if [[ -f $1/nginx.pid ]]; then
		kill -QUIT "$(cat "$1/nginx.pid")" 2>/dev/null || true
	fi
}
