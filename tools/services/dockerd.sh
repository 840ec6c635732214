#!/usr/bin/env bash
# A private Docker engine for tests and CI: nothing of the host's network or Docker setup is touched.
#
#   tools/services/dockerd.sh start DIR   start dockerd with its data, exec root, socket and pidfile in DIR,
#                                          wait until it answers, print `DOCKER_HOST=unix://DIR/docker.sock`
#   tools/services/dockerd.sh stop DIR    remove the project's containers (label wuu.profile), then stop
#                                          that dockerd by its pid
#
# No iptables rules, no IP masquerading, no bridge: containers use `network: none` (or `host`).
# Needs root and `dockerd` (apt-get install -y docker.io).
set -euo pipefail

READY_DEADLINE_S=${WUU_DOCKERD_READY_S:-30}
STOP_DEADLINE_S=${WUU_DOCKERD_STOP_S:-30}

usage() {
	echo "usage: $0 start|stop DIR" >&2
	exit 2
}

[[ $# -eq 2 ]] || usage
action=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
socket=$dir/docker.sock
pidfile=$dir/dockerd.pid
export DOCKER_HOST=unix://$socket

answers() {
	docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
	[[ -s $pidfile ]] || return 1
	local pid
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

start() {
	if running_pid >/dev/null && answers; then
		echo "DOCKER_HOST=$DOCKER_HOST"
		return
	fi
	command -v dockerd >/dev/null || {
		echo "dockerd.sh: dockerd is not installed (apt-get install -y docker.io)" >&2
		exit 1
	}
	mkdir -p "$dir/data" "$dir/exec"
	rm -f "$socket" "$pidfile"
	# containerd is started by dockerd itself (its own state under the exec root).
	setsid dockerd \
		--iptables=false --ip-masq=false --bridge=none \
		--data-root "$dir/data" --exec-root "$dir/exec" \
		-H "unix://$socket" --pidfile "$pidfile" \
		>"$dir/dockerd.log" 2>&1 </dev/null &
	local deadline=$((SECONDS + READY_DEADLINE_S))
	until answers; do
		if ((SECONDS >= deadline)); then
			echo "dockerd.sh: dockerd did not answer within ${READY_DEADLINE_S} s; its log:" >&2
			tail -n 30 "$dir/dockerd.log" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
	echo "DOCKER_HOST=$DOCKER_HOST"
}

stop() {
	local pid
	if ! pid=$(running_pid); then
		echo "dockerd.sh: no dockerd runs from $dir" >&2
		return
	fi
	# Containers first: a running container makes dockerd's own stop take over 12 s.
	if answers; then
		local ids
		ids=$(docker ps -aq --filter label=wuu.profile)
		if [[ -n $ids ]]; then
			# shellcheck disable=SC2086
			docker rm -f $ids >/dev/null
		fi
	fi
	kill -TERM "$pid"
	local deadline=$((SECONDS + STOP_DEADLINE_S))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "dockerd.sh: dockerd (pid $pid) did not stop within ${STOP_DEADLINE_S} s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	rm -f "$socket" "$pidfile"
}

case $action in
start) start ;;
stop) stop ;;
*) usage ;;
esac
