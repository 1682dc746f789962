#!/usr/bin/env bash
# Start the coscheduling gang scheduler against the cluster of a kubeconfig.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STATE_DIR="${COSCHEDULING_STATE_DIR:-$REPO/.coscheduling}"

usage() {
  cat <<USAGE
Usage:
  deploy/start.sh [--kubeconfig FILE] [--config FILE] [--log FILE] [--grpc-socket PATH]
                  [--background] [-- EXTRA...]
  deploy/start.sh stop
  deploy/start.sh --help

Applies the PodGroup CRD (crd/) and starts the scheduler (schedulerName batch-scheduler by
default) against the cluster of the kubeconfig given with --kubeconfig, else \$KUBECONFIG.

  --kubeconfig FILE  credentials of the cluster (default: \$KUBECONFIG)
  --config FILE      scheduler configuration (default: deploy/config.yaml)
  --log FILE         log file; the log also goes to the terminal (default: $STATE_DIR/scheduler.log)
  --grpc-socket PATH serve the gRPC extension points on this Unix socket, which only the
                     user running the scheduler can open (mode 0600). Without it gRPC is off:
                     a loopback port would let any local user call PreFilter and Reserve with
                     the credentials of this kubeconfig. (-- --address HOST:PORT still works.)
  --background       detach; the pid goes to $STATE_DIR/scheduler.pid
  stop               stop a scheduler started with --background
  EXTRA              passed to 'coscheduling run' (e.g. -v 1 --log-format json)

Exit codes: 0 stopped cleanly, 1 the scheduler failed, 2 bad usage or the cluster could not
be reached with these credentials.
USAGE
}

die() { echo "start.sh: $*" >&2; exit 2; }

python_bin() {
  if [ -n "${COSCHEDULING_PYTHON:-}" ]; then echo "$COSCHEDULING_PYTHON"; return; fi
  if [ ! -x "$REPO/.venv/bin/python" ]; then
    echo "start.sh: installing the scheduler into $REPO/.venv (first run)" >&2
    make -C "$REPO" venv >&2
  fi
  echo "$REPO/.venv/bin/python"
}

stop_scheduler() {
  local pidfile="$STATE_DIR/scheduler.pid"
  [ -f "$pidfile" ] || { echo "start.sh: no scheduler started with --background ($pidfile missing)"; return 0; }
  local pid; pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null && grep -q coscheduling "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "start.sh: stopped scheduler (pid $pid)"
  else
    echo "start.sh: scheduler (pid $pid) was not running"
  fi
  rm -f "$pidfile"
}

KUBECONFIG_FILE="${KUBECONFIG:-}"
CONFIG="$HERE/config.yaml"
LOG=""
BACKGROUND=0
GRPC_SOCKET=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    stop) stop_scheduler; exit 0 ;;
    --kubeconfig) [ $# -ge 2 ] || die "--kubeconfig needs a file"; KUBECONFIG_FILE="$2"; shift 2 ;;
    --kubeconfig=*) KUBECONFIG_FILE="${1#*=}"; shift ;;
    --config) [ $# -ge 2 ] || die "--config needs a file"; CONFIG="$2"; shift 2 ;;
    --config=*) CONFIG="${1#*=}"; shift ;;
    --log) [ $# -ge 2 ] || die "--log needs a file"; LOG="$2"; shift 2 ;;
    --log=*) LOG="${1#*=}"; shift ;;
    --grpc-socket) [ $# -ge 2 ] || die "--grpc-socket needs a path"; GRPC_SOCKET="$2"; shift 2 ;;
    --grpc-socket=*) GRPC_SOCKET="${1#*=}"; shift ;;
    --background|-d) BACKGROUND=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

[ -n "$KUBECONFIG_FILE" ] || die "no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG"
[ -r "$KUBECONFIG_FILE" ] || die "kubeconfig $KUBECONFIG_FILE does not exist or is not readable"
[ -r "$CONFIG" ] || die "configuration $CONFIG does not exist or is not readable"
command -v kubectl >/dev/null || die "kubectl is not on PATH; it is needed to apply the CRD"
mkdir -p "$STATE_DIR"
LOG="${LOG:-$STATE_DIR/scheduler.log}"

# Reach the API server with these credentials before anything else, and say what failed.
if ! out="$(kubectl --kubeconfig "$KUBECONFIG_FILE" get --raw /readyz --request-timeout=10s 2>&1)"; then
  case "$out" in
    *Unauthorized*|*401*) die "the API server refused the credentials in $KUBECONFIG_FILE (401 Unauthorized)" ;;
    *Forbidden*|*403*) die "the credentials in $KUBECONFIG_FILE are not allowed to read /readyz (403 Forbidden): $out" ;;
    *refused*|*"no such host"*|*timeout*|*"Unable to connect"*|*"dial tcp"*)
      die "cannot reach the API server of $KUBECONFIG_FILE: $out" ;;
    *) die "the API server of $KUBECONFIG_FILE did not answer /readyz: $out" ;;
  esac
fi

kubectl --kubeconfig "$KUBECONFIG_FILE" apply -f "$REPO/crd/" >&2
kubectl --kubeconfig "$KUBECONFIG_FILE" wait --for=condition=Established --timeout=60s \
  crd/podgroups.batch.scheduler.tencent.com >&2

PY="$(python_bin)"
"$PY" -m coscheduling config validate "$CONFIG" >&2 || exit 2
GRPC=(--no-grpc)
GRPC_SAID="gRPC is off (--grpc-socket PATH serves it on a socket only you can open)"
if [ -n "$GRPC_SOCKET" ]; then
  GRPC=(--address "unix:$GRPC_SOCKET")
  GRPC_SAID="gRPC on the Unix socket $GRPC_SOCKET (mode 0600: only $(id -un) can call it)"
else
  for arg in ${EXTRA[@]+"${EXTRA[@]}"}; do
    case "$arg" in
      --address|--address=*) GRPC=(); GRPC_SAID="gRPC where -- --address says" ;;
    esac
  done
fi
echo "start.sh: $GRPC_SAID" >&2
CMD=("$PY" -m coscheduling run --kubeconfig "$KUBECONFIG_FILE" --config "$CONFIG"
     ${GRPC[@]+"${GRPC[@]}"} ${EXTRA[@]+"${EXTRA[@]}"})

if [ "$BACKGROUND" = 1 ]; then
  [ -f "$STATE_DIR/scheduler.pid" ] && kill -0 "$(cat "$STATE_DIR/scheduler.pid")" 2>/dev/null \
    && die "a scheduler is already running (pid $(cat "$STATE_DIR/scheduler.pid")); run: deploy/start.sh stop"
  nohup "${CMD[@]}" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/scheduler.pid"
  echo "start.sh: scheduler started (pid $!), logging to $LOG; stop it with: deploy/start.sh stop"
  exit 0
fi

echo "start.sh: starting the scheduler, logging to $LOG and here (Ctrl-C stops it)" >&2
set +e
"${CMD[@]}" 2>&1 | tee -a "$LOG"
status="${PIPESTATUS[0]}"
exit "$status"
