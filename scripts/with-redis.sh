#!/usr/bin/env bash
# with-redis.sh CMD...: runs CMD with a throwaway redis-server on a free
# loopback port, exported as ALLOT_TEST_REDIS, and stops that server (by its
# PID) when CMD ends, whether CMD passed or failed. Installs redis-server with
# apt-get when it is missing and we are root.
set -euo pipefail

ensure_redis() {
	if command -v redis-server >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "with-redis: redis-server is not installed; install it (apt-get install -y redis-server) or run as root" >&2
		exit 1
	fi
	echo "with-redis: installing redis-server" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y redis-server >/dev/null 2>&1 || {
		apt-get update >/dev/null
		apt-get install -y redis-server >/dev/null
	}
	# Debian starts a system instance on 6379; our tests never use it.
}

ensure_redis

dir=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

for _ in $(seq 1 20); do
	port=$((20000 + RANDOM % 30000))
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" --logfile "$dir/redis.log" >/dev/null 2>&1 &
	pid=$!
	for _ in $(seq 1 50); do
		if redis-cli -p "$port" ping >/dev/null 2>&1; then
			break 2
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
done
if [ -z "$pid" ]; then
	echo "with-redis: could not start redis-server" >&2
	cat "$dir/redis.log" >&2 || true
	exit 1
fi

export ALLOT_TEST_REDIS="redis://127.0.0.1:$port/0"
export ALLOT_REQUIRE_REDIS=1
echo "with-redis: redis-server pid $pid on $ALLOT_TEST_REDIS" >&2
status=0
"$@" || status=$?
exit "$status"
