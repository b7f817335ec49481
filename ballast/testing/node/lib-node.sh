# Shared by up-node.sh and down-node.sh (a real kubelet + its own containerd as a test node); sourced, never run.
#
# Every path is derived at run time: the node's folder is $BALLAST_KUBELET_DIR/NODE (default
# ${TMPDIR:-/tmp}/ballast-kubelet/NODE); the binaries are KUBELET / KUBECTL (the tests pass the control plane's
# unpacked ones), else kubelet.xz and kubectl.xz of $BALLAST_SHARED_K8S (default: ../shared/k8s beside the
# clone), checked against its SHA256SUMS and unpacked once into $BALLAST_KUBELET_DIR/bin.

# shellcheck shell=bash disable=SC2034,SC2016  # variables are for the sourcing scripts; '$0' is bash -c's
export LC_ALL=C

node_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
default_k8s=$node_here/../../../../shared/k8s  # ballast/testing/node in the clone; shared/ beside the clone
SHARED_K8S=${BALLAST_SHARED_K8S:-$default_k8s}
BASE=${BALLAST_KUBELET_DIR:-${TMPDIR:-/tmp}/ballast-kubelet}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
IMG_PAUSE=localhost/ballast-pause:1
IMG_BUSYBOX=localhost/ballast-busybox:1
IMG_STAMP=1  # bump when the image recipe changes

node_die() {
  echo "error: $*" >&2
  exit 1
}

node_usage() {  # the calling script's leading comment block, to stderr
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0" >&2
  exit 2
}

# node_set NODE: the node's name and every path derived from it
node_set() {
  [[ $1 =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || node_die "node name must be a DNS label: $1"
  NODE=$1
  DIR=$BASE/$NODE
  RUN=$DIR/run
  LOGS=$DIR/logs
  CTRD=$DIR/containerd
  SOCK=$CTRD/containerd.sock
  KDIR=$DIR/kubelet
  ((${#SOCK} < 100)) || node_die "socket path too long (${#SOCK} characters): $SOCK; set BALLAST_KUBELET_DIR"
}

node_lock() {
  mkdir -p "$RUN" "$LOGS"
  exec 9>"$RUN/.lock"
  flock -w 300 9 || node_die "another up-node.sh/down-node.sh holds $RUN/.lock for over 300 s"
}

node_us() { echo "${EPOCHREALTIME/./}"; }

node_since() {  # seconds since a node_us stamp, one decimal
  local us=$(($(node_us) - $1))
  printf '%d.%d' $((us / 1000000)) $(((us / 100000) % 10))
}

node_note() {  # to stdout and to logs/node.log
  echo "$*"
  printf '%s %s: %s\n' "$(date -u +%FT%TZ)" "${0##*/}" "$*" >>"$LOGS/node.log" 2>/dev/null || true
}

node_is() {  # node_is NAME PID: PID is a live process running a binary called NAME
  local exe
  exe=$(readlink "/proc/$2/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [[ ${exe##*/} == "$1" ]]
}

node_running() {  # node_running PID: a live process (zombies count as gone)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

node_pid() {  # the pid of this node's running NAME, from run/NAME.pid; fails when none runs
  local pid
  [[ -s $RUN/$1.pid ]] || return 1
  read -r pid <"$RUN/$1.pid" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  node_is "$1" "$pid" || return 1
  echo "$pid"
}

node_port_busy() {  # something accepts connections on 127.0.0.1:PORT
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

node_tail() {  # last lines of NAME's log, to stderr
  echo "--- last lines of $LOGS/$1.log:" >&2
  tail -n "${2:-40}" "$LOGS/$1.log" >&2 2>/dev/null || true
}

# node_launch NAME ARGV...: starts ARGV in a session of its own (setsid, SIGHUP ignored), stdin /dev/null,
# output to logs/NAME.log (the previous one kept as NAME.log.prev); the process writes its own pid to
# run/NAME.pid before it execs. Sets NODE_PID.
node_launch() {
  local name=$1 pidf=$RUN/$1.pid log=$LOGS/$1.log n=100
  shift
  [[ -f $log ]] && mv -f "$log" "$log.prev"
  printf '=== %s %s: %s\n' "$(date -u +%FT%TZ)" "${0##*/}" "$*" >"$log"
  rm -f "$pidf"
  setsid bash -c 'echo $$ >"$0.tmp" && mv -f "$0.tmp" "$0" && exec nohup "$@"' "$pidf" "$@" \
    </dev/null >>"$log" 2>&1 9>&- &
  while ((n-- > 0)); do
    [[ -s $pidf ]] && break
    sleep 0.05
  done
  [[ -s $pidf ]] || { node_tail "$name"; node_die "$name: no pid file 5 s after the start"; }
  read -r NODE_PID <"$pidf"
}

# node_wait NAME PID SECONDS CHECK...: polls CHECK until it succeeds; fails with the log's tail when the
# process exits first or SECONDS pass.
node_wait() {
  local name=$1 pid=$2 limit=$3 t0
  shift 3
  t0=$(node_us)
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    if ! node_running "$pid"; then
      echo "error: $name (pid $pid) exited before it became ready" >&2
      node_tail "$name"
      rm -f "$RUN/$name.pid"
      return 1
    fi
    if (($(node_us) - t0 > limit * 1000000)); then
      echo "error: $name (pid $pid) not ready after $limit s" >&2
      node_tail "$name"
      return 1
    fi
    sleep 0.2
  done
}

# node_stop NAME [GRACE]: SIGTERM to this node's NAME (pid file, checked against the binary), SIGKILL after
# GRACE seconds; removes the pid file. Does nothing when NAME does not run.
node_stop() {
  local name=$1 grace=${2:-15} pid t0 n
  if ! pid=$(node_pid "$name"); then
    rm -f "$RUN/$name.pid"
    return 0
  fi
  t0=$(node_us)
  kill -TERM "$pid" 2>/dev/null || true
  n=$((grace * 20))
  while ((n-- > 0)) && node_is "$name" "$pid"; do sleep 0.05; done
  if node_is "$name" "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    n=200
    while ((n-- > 0)) && node_is "$name" "$pid"; do sleep 0.05; done
    node_is "$name" "$pid" && node_die "$name (pid $pid) still runs after SIGKILL"
    node_note "$name: killed pid $pid (no exit within $grace s of SIGTERM)"
  else
    node_note "$name: stopped pid $pid ($(node_since "$t0") s)"
  fi
  rm -f "$RUN/$name.pid"
}

node_ctr() { ctr -a "$SOCK" -n k8s.io "$@"; }

# node_binary NAME: prints the path of kubelet/kubectl to run: $KUBELET/$KUBECTL when set, else BASE/bin/NAME,
# unpacked from SHARED_K8S/NAME.xz and checked against SHARED_K8S/SHA256SUMS (once; again when the sum differs)
node_binary() {
  local name=$1 var want have out
  var=${name^^}
  if [[ -n ${!var:-} ]]; then
    [[ -x ${!var} ]] || node_die "$var=${!var} is not an executable file"
    echo "${!var}"
    return
  fi
  out=$BASE/bin/$name
  want=$(awk -v n="$name" '$2 == n {print $1}' "$SHARED_K8S/SHA256SUMS" 2>/dev/null)
  [[ -n $want ]] || node_die "no $name line in $SHARED_K8S/SHA256SUMS (or set $var)"
  if [[ -x $out ]]; then
    have=$(sha256sum "$out" | cut -d' ' -f1)
    [[ $have == "$want" ]] && { echo "$out"; return; }
  fi
  [[ -f $SHARED_K8S/$name.xz ]] || node_die "no $SHARED_K8S/$name.xz (or set $var)"
  mkdir -p "$BASE/bin"
  xz -dc "$SHARED_K8S/$name.xz" >"$out.tmp"
  have=$(sha256sum "$out.tmp" | cut -d' ' -f1)
  [[ $have == "$want" ]] || { rm -f "$out.tmp"; node_die "$name.xz unpacks to sha256 $have, SHA256SUMS says $want"; }
  chmod 755 "$out.tmp"
  mv -f "$out.tmp" "$out"
  echo "$out"
}

# node_cgroup_mounts: the mount points of every cgroup v1 hierarchy and of the cgroup2 (unified) one
node_cgroup_mounts() {
  awk '{for (i = 7; i <= NF; i++) if ($i == "-") break; if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $5}' \
    /proc/self/mountinfo
}

# node_cgroup_mount CONTROLLER: the mount point of a cgroup v1 controller (cpu, memory, ..., name=systemd)
node_cgroup_mount() {
  awk -v c="$1" '{for (i = 7; i <= NF; i++) if ($i == "-") break
    if ($(i+1) != "cgroup") next; n = split($(i+3), o, ","); for (j = 1; j <= n; j++) if (o[j] == c) {print $5; exit}}' \
    /proc/self/mountinfo
}

# node_cgroup_dirs: the cgroup folders (relative to each hierarchy) this node's kubelet owns, one a line:
# CGROUP_ROOT when up-node.sh made it, else CGROUP_ROOT/kubepods (see run/cgroups)
node_cgroup_dirs() {
  [[ -s $RUN/cgroups ]] && cat "$RUN/cgroups"
}

# node_cgroup_pids: pids of every process in this node's cgroups (any hierarchy)
node_cgroup_pids() {
  local m d
  while read -r d; do
    [[ -n $d && $d != / ]] || continue
    while read -r m; do
      [[ -d $m$d ]] && find "$m$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done < <(node_cgroup_mounts)
  done < <(node_cgroup_dirs)
}

# node_mounts_under DIR: mount points at or below DIR, deepest (latest) first
node_mounts_under() {
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | tac
}
