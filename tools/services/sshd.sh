#!/usr/bin/env bash
# A private OpenSSH server for the ssh backend's tests and CI: the host's own sshd and its config are
# never touched.
#
#   tools/services/sshd.sh start DIR   start sshd on 127.0.0.1 with its config, host key, pidfile,
#                                       authorized keys, client key pair and known_hosts file in DIR,
#                                       wait until it accepts a real login, print `WUU_SSH_TEST_DIR=DIR`
#   tools/services/sshd.sh stop DIR    stop that sshd by its pid, and the workers its sessions left
#                                       (the processes in its mount namespace)
#
# The remote account is a dedicated user (`wuu-ssh`, WUU_SSHD_USER) with /bin/sh as shell and DIR as
# home; it owns DIR/workspace, the profile's workspace. The port is 2222 (WUU_SSHD_PORT).
#
# The "remote machine" is this machine, with one difference that makes it behave like another one:
# sshd runs in a mount namespace of its own, where DIR/host-only is an empty tmpfs. Paths the host
# invents there (the conformance runner's workspaces, with TMPDIR=DIR/host-only) exist only on the host
# side, and the worker creates its own directories at the same paths on the "remote" side.
#
# The remote worker is the repository's worker. When the remote user cannot run the repository's
# .venv python (e.g. it lives under a private /root), DIR/remote-venv is made from an interpreter of the
# same version that the user can run, with the .venv's packages on its path.
#
# DIR/service.json describes the server for tests: {"profile": <an ssh profile>, "host_only": DIR/host-only,
# "user": ..., "port": ...}. Needs root, `sshd` (apt-get install -y openssh-server), util-linux.
set -euo pipefail

PORT=${WUU_SSHD_PORT:-2222}
USER_NAME=${WUU_SSHD_USER:-wuu-ssh}
READY_DEADLINE_S=${WUU_SSHD_READY_S:-20}
STOP_DEADLINE_S=${WUU_SSHD_STOP_S:-10}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HOST_PYTHON=${WUU_SSHD_PYTHON:-$REPO/.venv/bin/python}
SSHD=/usr/sbin/sshd

usage() {
	echo "usage: $0 start|stop DIR" >&2
	exit 2
}

fail() {
	echo "sshd.sh: $*" >&2
	exit 1
}

[[ $# -eq 2 ]] || usage
action=$1
dir=$(realpath -m -- "$2")
[[ $dir =~ ^[A-Za-z0-9/._-]+$ ]] || fail "DIR must be a plain path (letters, digits, / . _ -): $dir"
# The tests' worker sockets are DIR/workspace/<test>/.wuu-<conversation>/worker.sock: at most 107 bytes.
((${#dir} <= 50)) || fail "DIR must be at most 50 characters (the workers' Unix socket paths are beneath it): $dir"
mkdir -p "$dir"
config=$dir/sshd_config
pidfile=$dir/sshd.pid
log=$dir/sshd.log
host_key=$dir/ssh_host_ed25519_key
client_key=$dir/client_ed25519
authorized=$dir/authorized_keys
known_hosts=$dir/known_hosts
workspace=$dir/workspace
host_only=$dir/host-only
namespace_file=$dir/sshd.mntns

running_pid() {
	[[ -s $pidfile ]] || return 1
	local pid
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

as_user() {
	runuser -u "$USER_NAME" -- "$@"
}

ensure_user() {
	if id -u "$USER_NAME" >/dev/null 2>&1; then
		local entry
		entry=$(getent passwd "$USER_NAME")
		[[ $entry == *":$dir:/bin/sh" ]] || usermod -d "$dir" -s /bin/sh "$USER_NAME"
	else
		useradd -M -d "$dir" -s /bin/sh "$USER_NAME"
	fi
	# A locked account ('!') is refused by sshd without PAM; '*' has no password and is not locked.
	usermod -p '*' "$USER_NAME"
}

ensure_keys() {
	[[ -s $host_key ]] || ssh-keygen -q -t ed25519 -N '' -C "wuu-sshd-host" -f "$host_key"
	[[ -s $client_key ]] || ssh-keygen -q -t ed25519 -N '' -C "wuu-sshd-client" -f "$client_key"
	chmod 0600 "$host_key" "$client_key"
	cp "$client_key.pub" "$authorized"
	chmod 0644 "$authorized"
	local name="[127.0.0.1]:$PORT"
	[[ $PORT == 22 ]] && name=127.0.0.1
	echo "$name $(cut -d' ' -f1,2 "$host_key.pub")" >"$known_hosts"
}

# The python the remote user runs the worker with: the repository's, else DIR/remote-venv.
remote_python() {
	[[ -x $HOST_PYTHON ]] || fail "no python at $HOST_PYTHON (run make venv first, or set WUU_SSHD_PYTHON)"
	if as_user "$HOST_PYTHON" -c 'import wuu.worker.native.worker' >/dev/null 2>&1; then
		echo "$HOST_PYTHON"
		return
	fi
	local version purelib base="" candidate venv=$dir/remote-venv
	version=$("$HOST_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	purelib=$("$HOST_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	for candidate in "/usr/local/bin/python$version" "/usr/bin/python$version"; do
		[[ -x $candidate ]] || continue
		if [[ $(as_user "$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) == "$version" ]]; then
			base=$candidate
			break
		fi
	done
	[[ -n $base ]] || fail "the user $USER_NAME cannot run $HOST_PYTHON, and no python$version it can run was found"
	if [[ ! -x $venv/bin/python ]]; then
		"$base" -m venv --without-pip "$venv" >&2
	fi
	local site
	site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	echo "import site; site.addsitedir('$purelib')" >"$site/wuu-host-venv.pth"
	chmod -R a+rX "$venv"
	as_user "$venv/bin/python" -c 'import wuu.worker.native.worker' >&2 ||
		fail "the user $USER_NAME cannot import the worker with $venv/bin/python (is $REPO readable to it?)"
	echo "$venv/bin/python"
}

write_config() {
	cat >"$config" <<-EOF
		# A private sshd for the wuu ssh backend's tests (tools/services/sshd.sh); not the host's sshd.
		Port $PORT
		ListenAddress 127.0.0.1
		HostKey $host_key
		PidFile $pidfile
		AuthorizedKeysFile $authorized
		UsePAM no
		StrictModes no
		AllowUsers $USER_NAME
		PermitRootLogin no
		PubkeyAuthentication yes
		AuthenticationMethods publickey
		PasswordAuthentication no
		KbdInteractiveAuthentication no
		X11Forwarding no
		AllowTcpForwarding no
		AllowAgentForwarding no
		PermitTunnel no
		PrintMotd no
		PrintLastLog no
		MaxStartups 64:30:128
		MaxSessions 64
	EOF
}

accepts() {
	(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

start() {
	[[ $EUID -eq 0 ]] || fail "start needs root (a dedicated user, and sshd's privilege separation)"
	[[ -x $SSHD ]] || fail "$SSHD is not installed (apt-get install -y openssh-server)"
	if running_pid >/dev/null && accepts; then
		echo "WUU_SSH_TEST_DIR=$dir"
		return
	fi
	ensure_user
	chmod 0755 "$dir"
	mkdir -p "$workspace" "$host_only"
	chown "$USER_NAME:" "$workspace"
	chmod 0755 "$workspace" "$host_only"
	ensure_keys
	as_user test -w "$workspace" ||
		fail "the user $USER_NAME cannot write $workspace (can it traverse every parent of $dir?)"
	local python
	python=$(remote_python)
	write_config
	mkdir -p -m 0755 /run/sshd
	"$SSHD" -t -f "$config" || fail "sshd refuses its config $config"
	rm -f "$pidfile"
	# Its own mount namespace: DIR/host-only is an empty tmpfs there (see the top of this file).
	# sshd daemonizes; its sessions (and the detached workers they start) stay in the namespace.
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t tmpfs -o mode=1777,size=1g wuu-remote-only "$1" && exec "$2" -f "$3" -E "$4"' \
		sshd-ns "$host_only" "$SSHD" "$config" "$log" ||
		fail "sshd did not start in its own mount namespace (unshare needs CAP_SYS_ADMIN); log: $log"
	local deadline=$((SECONDS + READY_DEADLINE_S)) pid=""
	until pid=$(running_pid) && accepts; do
		if ((SECONDS >= deadline)); then
			echo "sshd.sh: sshd did not accept connections on 127.0.0.1:$PORT within ${READY_DEADLINE_S} s; its log:" >&2
			tail -n 30 "$log" >&2 || true
			exit 1
		fi
		sleep 0.05
	done
	local namespace
	namespace=$(readlink "/proc/$pid/ns/mnt")
	[[ $namespace != "$(readlink /proc/self/ns/mnt)" ]] || fail "sshd runs in the host's mount namespace"
	echo "$namespace" >"$namespace_file"
	# A real login, with strict host-key checking, that imports the worker: the whole chain works.
	if command -v ssh >/dev/null; then
		ssh -F /dev/null -p "$PORT" -i "$client_key" -o IdentitiesOnly=yes -o BatchMode=yes \
			-o StrictHostKeyChecking=yes -o UserKnownHostsFile="$known_hosts" -o ConnectTimeout=10 \
			"$USER_NAME@127.0.0.1" "$python -c 'import wuu.worker.native.worker'" ||
			fail "a login to $USER_NAME@127.0.0.1:$PORT that imports the worker failed; log: $log"
	fi
	"$python" - "$dir/service.json" <<-EOF
		import json, sys
		service = {
		    "profile": {
		        "backend": "ssh",
		        "host": "$USER_NAME@127.0.0.1",
		        "port": $PORT,
		        "identity_file": "$client_key",
		        "known_hosts_file": "$known_hosts",
		        "workspace": "$workspace",
		        "worker": ["$python", "-m", "wuu.worker"],
		    },
		    "host_only": "$host_only",
		    "user": "$USER_NAME",
		    "port": $PORT,
		}
		with open(sys.argv[1], "w") as out:
		    json.dump(service, out, indent=2)
	EOF
	echo "WUU_SSH_TEST_DIR=$dir"
}

# The processes in sshd's mount namespace: sshd, its sessions and the detached workers they started.
namespace_pids() {
	[[ -s $namespace_file ]] || return 0
	local wanted entry pid
	wanted=$(cat "$namespace_file")
	# Never the host's own namespace: that would name every process of the machine.
	[[ $wanted != "$(readlink /proc/self/ns/mnt)" ]] || return 0
	for entry in /proc/[0-9]*; do
		pid=${entry#/proc/}
		[[ $(readlink "$entry/ns/mnt" 2>/dev/null) == "$wanted" ]] && echo "$pid"
	done
	return 0
}

stop() {
	local pid pids
	if pid=$(running_pid); then
		kill "$pid" 2>/dev/null || true
	else
		echo "sshd.sh: no sshd runs from $dir" >&2
	fi
	# The detached workers outlive sshd: end them by their ids (TERM, then KILL after the deadline).
	pids=$(namespace_pids)
	# shellcheck disable=SC2086
	[[ -z $pids ]] || kill -TERM $pids 2>/dev/null || true
	local deadline=$((SECONDS + STOP_DEADLINE_S))
	while pids=$(namespace_pids) && [[ -n $pids ]]; do
		if ((SECONDS >= deadline)); then
			# shellcheck disable=SC2086
			kill -KILL $pids 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	rm -f "$pidfile" "$namespace_file"
}

case $action in
start) start ;;
stop) stop ;;
*) usage ;;
esac
