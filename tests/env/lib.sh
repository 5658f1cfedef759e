# Shared helpers for the test environment scripts (sourced, never executed).
# Every component script (tests/env/<component>/ctl) builds on these, so that ports,
# logs, pid files and error messages behave the same for the API server, Kafka and NATS.

ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Where the servers keep their state, ports, pids and logs: tests/env/.state, or another
# directory for a second, separate set of servers (tests/run starts one for the binaries
# listed in tests/own-servers). Its env.sh exports it, so that tests which act on a server
# (tests/env/<component>/ctl) act on the servers they were given.
STATE_DIR="${DELTASHIP_TEST_ENV_STATE:-$ENV_DIR/.state}"
LOG_DIR="$STATE_DIR/logs"
PID_DIR="$STATE_DIR/pids"
# Builds and downloads outlive the clone: CI and new checkouts on the same machine reuse them.
CACHE_DIR="${DELTASHIP_ENV_CACHE:-$HOME/.cache/deltaship-env}"
mkdir -p "$LOG_DIR" "$PID_DIR" "$CACHE_DIR"
# Where the node's pods reach the host (the pod bridge's own address; tests/env/node/ctl sends
# it to 127.0.0.1, same port), and so where servers advertise themselves to pods.
NODE_HOST_IP=10.244.0.1

log() { printf '[env] %s\n' "$*" >&2; }
die() { printf '[env] error: %s\n' "$*" >&2; exit 1; }

# require_tool TOOL HINT: fail with an install hint when a toolchain is missing.
require_tool() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH; $2"
}

# free_port: print a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# install_debian_packages WHAT PACKAGE...: install those of Debian's packages that are
# missing (as root; otherwise fail naming the apt-get command). WHAT names the logs.
install_debian_packages() {
  local what=$1 missing=() p; shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "$what needs Debian packages ${missing[*]}; install them as root (apt-get install ${missing[*]})"
  log "installing ${missing[*]} from Debian's packages"
  run_logged "apt-get update" "$LOG_DIR/$what-apt.log" apt-get update
  DEBIAN_FRONTEND=noninteractive run_logged "apt-get install ${missing[*]}" "$LOG_DIR/$what-apt-install.log" \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# port_in_use PORT: true when something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ensure_port_free PORT WHAT: a clear error instead of a confusing bind failure later.
ensure_port_free() {
  if port_in_use "$1"; then
    die "port $1 (wanted for $2) is already in use on 127.0.0.1; stop whatever listens there (ss -ltnp 'sport = :$1') or run tests/env/down"
  fi
}

# state_get NAME / state_set NAME VALUE: small persistent values (ports, tokens) that must
# survive restarts of a server, so that clients reconnect to the same address.
state_get() { [ -f "$STATE_DIR/vars/$1" ] && cat "$STATE_DIR/vars/$1"; }
state_set() { mkdir -p "$STATE_DIR/vars"; printf '%s' "$2" > "$STATE_DIR/vars/$1"; }

# port_for NAME: the port remembered under NAME, or a new free one (remembered from now on).
port_for() {
  local p
  p=$(state_get "port_$1")
  if [ -z "$p" ]; then p=$(free_port); state_set "port_$1" "$p"; fi
  printf '%s' "$p"
}

pid_of() { [ -f "$PID_DIR/$1.pid" ] && cat "$PID_DIR/$1.pid"; }

# is_running NAME: the daemon started under NAME is alive. A killed process stays a
# zombie until it is reaped, and kill -0 still succeeds on a zombie, so read its state too.
is_running() {
  local pid state; pid=$(pid_of "$1") || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != "Z" ]
}

# start_daemon NAME CMD...: run CMD in its own session (so stop_daemon can end the whole
# process group), output to $LOG_DIR/NAME.log, pid to $PID_DIR/NAME.pid.
start_daemon() {
  local name=$1; shift
  local logf="$LOG_DIR/$name.log"
  printf '\n===== %s starting %s =====\n' "$(date -u +%FT%TZ)" "$name" >> "$logf"
  setsid "$@" >> "$logf" 2>&1 < /dev/null &
  echo $! > "$PID_DIR/$name.pid"
}

# stop_daemon NAME [SIGNAL]: TERM (or SIGNAL) to the process group, KILL after 20 s.
stop_daemon() {
  local name=$1 sig=${2:-TERM} pid i
  pid=$(pid_of "$name") || return 0
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop on SIG$sig within 20 s; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
      sleep 0.5
    fi
  fi
  rm -f "$PID_DIR/$name.pid"
}

# wait_until NAME TIMEOUT_SECS CMD...: poll CMD until it succeeds; on timeout or when the
# daemon NAME died, fail with the tail of its log.
wait_until() {
  local name=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! is_running "$name"; then
      tail -n 40 "$LOG_DIR/$name.log" >&2 || true
      die "$name exited before it became ready; full log: $LOG_DIR/$name.log"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 40 "$LOG_DIR/$name.log" >&2 || true
      die "$name was not ready within ${timeout}s; full log: $LOG_DIR/$name.log"
    fi
    sleep 0.5
  done
}

# run_logged WHAT LOGFILE CMD...: run a build step, keep its output, and on failure name the log.
run_logged() {
  local what=$1 logf=$2; shift 2
  mkdir -p "$(dirname "$logf")"
  log "$what (log: $logf)"
  if ! "$@" > "$logf" 2>&1; then
    tail -n 30 "$logf" >&2 || true
    die "$what failed; full log: $logf"
  fi
}

# write_env COMPONENT LINES...: the component's exports, assembled into env.sh by tests/env/up.
write_env() {
  local comp=$1; shift
  printf '%s\n' "$@" > "$STATE_DIR/$comp.env"
}

# issue_cert CA_DIR OUT_DIR NAME SUBJECT EXT...: OUT_DIR/NAME.{crt,key}, a 10-year certificate
# signed by CA_DIR/ca.{crt,key}, with the openssl extension lines EXT (subjectAltName=...,
# extendedKeyUsage=...). Output goes to the caller's log.
issue_cert() {
  local ca=$1 out=$2 name=$3 subj=$4; shift 4
  (
    umask 077
    openssl req -new -newkey rsa:2048 -nodes -keyout "$out/$name.key" -out "$out/$name.csr" -subj "$subj"
    printf '%s\n' "$@" > "$out/$name.ext"
    openssl x509 -req -in "$out/$name.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
      -CAserial "$out/$name.srl" -days 3650 -extfile "$out/$name.ext" -out "$out/$name.crt"
    rm -f "$out/$name.csr" "$out/$name.ext" "$out/$name.srl"
  )
}
