# shellcheck shell=sh
# The ssh backend's launcher (wuu/host/backends/ssh.py): the server's shell runs this text as
#
#   sh -c "$LAUNCHER" wuu-ssh-launch SUBDIR RUNDIR LIFETIME PERSISTENT USERS WORKER...
#
# SUBDIR is the conversation's subdirectory (the worker's root), RUNDIR the worker's own directory beside
# it (its socket, log and locks), LIFETIME the worker's idle timeout in seconds, PERSISTENT 1 to keep both
# directories after the worker exits, USERS the lock file of a SUBDIR that conversations share (empty when
# it is the conversation's own), and WORKER... the server's worker command (`serve` and `attach` are
# appended to it). It needs POSIX sh, flock and setsid (util-linux).
#
# It starts the detached worker when none runs, then becomes the relay to it (`WORKER... attach`), which
# starts while the worker does.
# A running worker holds a lock on RUNDIR for its whole life (fd 8, inherited by `serve`); launchers take
# turns on RUNDIR/launch.lock; a worker that is ending (its lock held, its socket gone) is waited for, so
# that its removal of the directories never races a new worker.
set -u
S=$1 R=$2 N=$3 P=$4 U=$5
shift 5
# ssh.py's SOCKET_NAME; the log is beside the socket, with the native worker's name for it.
SOCK=$R/worker.sock LOG=$R/worker.log

# The detached worker, run as `sh -c "$DAEMON" wuu-worker-daemon SUBDIR RUNDIR LIFETIME PERSISTENT USERS
# WORKER...` in a session of its own. Without PERSISTENT it removes both directories once the worker has
# exited cleanly; a worker whose cleanup failed, or that was killed, leaves them for inspection. A shared
# SUBDIR is used by every worker that holds a shared lock on USERS (fd 7, inherited by `serve`), and
# only the last one to end removes it: under the exclusive lock, which a starting worker waits for.
# shellcheck disable=SC2016 # expanded by the daemon's own shell, from its own arguments
DAEMON='exec 8<"$2" && flock -n 8 || exit 0
S=$1 R=$2 N=$3 P=$4 U=$5
shift 5
if [ -n "$U" ]; then exec 7>>"$U" && flock -s 7 || exit; fi
"$@" serve --socket "$R/worker.sock" --lifetime-seconds "$N" || exit
[ "$P" = 1 ] && exit
rm -rf -- "$R"
[ -n "$U" ] || exec rm -rf -- "$S"
exec 7>&-
flock -n -x "$U" rm -rf -- "$S"
'

tries=0
while :; do
  tries=$((tries + 1))
  if [ "$tries" -gt 200 ]; then
    echo "wuu ssh: the previous worker of $S did not end; its log is $LOG" >&2
    exit 1
  fi
  # The directory can vanish under us: a previous worker that is ending removes it. Only RUNDIR itself
  # is private; the workspace above it keeps the account's usual mode.
  # shellcheck disable=SC2174
  if ! mkdir -p -m 0700 -- "$R" || ! command exec 9>>"$R/launch.lock"; then
    sleep 0.05
    continue
  fi
  if ! flock -w 10 9; then
    echo "wuu ssh: another connection holds the start lock of $R" >&2
    exit 1
  fi
  if flock -n "$R" true; then
    # No worker holds RUNDIR: start one. The relay starts at once, beside it (two Python start-ups that
    # overlap), and waits for its socket. A watcher holds the start lock (its copy of fd 9) until the socket
    # is there; a worker that gives up first, it reports, and it ends the relay.
    rm -f -- "$SOCK"
    setsid sh -c "$DAEMON" wuu-worker-daemon "$S" "$R" "$N" "$P" "$U" "$@" </dev/null >>"$LOG" 2>&1 9>&- &
    relay=$$
    (
      i=0
      until [ -S "$SOCK" ]; do
        i=$((i + 1))
        if [ "$i" -gt 500 ] || { [ "$i" -gt 50 ] && flock -n "$R" true; }; then
          echo "wuu ssh: the worker did not start; the end of its log $LOG:" >&2
          tail -n 20 "$LOG" >&2
          kill "$relay"
          exit 1
        fi
        sleep 0.02
      done
    ) </dev/null >/dev/null &
    break
  fi
  # A worker holds RUNDIR: a running one has its socket; an ending one is waited for.
  [ -S "$SOCK" ] && break
  exec 9>&-
  sleep 0.05
done
exec 9>&-
# `--no-start`: only this launcher starts a worker, under its locks.
exec "$@" attach --socket "$SOCK" --lifetime-seconds "$N" --no-start
