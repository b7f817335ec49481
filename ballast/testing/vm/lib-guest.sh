# Shared by the scripts of this folder (real Kubernetes nodes as QEMU guests); sourced, never run.
#
# Every path is derived at run time. Read only: this folder, ../node/pause.c, and the binaries: KUBELET /
# KUBECTL when set (the tests pass the control plane's unpacked ones), else kubelet.xz and kubectl.xz of K8S
# (default: ../shared/k8s beside the clone), checked against its SHA256SUMS. Written: only $BALLAST_VM_DIR
# (default ${TMPDIR:-/tmp}/ballast-vm):
#   cache/        kubelet + kubectl (unpacked, sha256-checked)
#   build/        base-SUITE/ (mmdebstrap, kept), rootfs-SUITE/ (only during a build)
#   images/SUITE/ disk.img (raw ext4, the shared read-only base of every guest), vmlinuz, initrd.img, build.txt
#   pki/          id_ed25519 (ssh key of every guest's root)
#   guests/NODE/  disk.qcow2 (overlay), seed.tar, pki/, console.log, qemu.pid, ports, guest.env, boot.txt
#   logs/         what a removed guest left (console), build logs

# shellcheck shell=bash disable=SC2034
export LC_ALL=C

VM_RECIPE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
K8S=${K8S:-$VM_RECIPE/../../../../shared/k8s} # ballast/testing/vm in the clone; shared/ beside the clone
PAUSE_C=$VM_RECIPE/../node/pause.c
VM_DIR=${BALLAST_VM_DIR:-${TMPDIR:-/tmp}/ballast-vm}
SUITE=${SUITE:-trixie}
GUEST_IP=10.0.2.15 # slirp's default guest address; every guest has a slirp network of its own
HOST_IP=10.0.2.2   # slirp's address of the host's loopback
SERVICE_IP=10.96.0.1 # the `kubernetes` Service (the test control plane's --service-cluster-ip-range 10.96.0.0/24)
POD_CIDR=10.88.0.0/16 # the bridge CNI network inside every guest
IMG_DIR=$VM_DIR/images/$SUITE
SSH_KEY=$VM_DIR/pki/id_ed25519
VM_SSH_OPTS=()

vm_die() {
  echo "error: $*" >&2
  exit 1
}

vm_usage() { # the calling script's leading comment block, to stderr
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0" >&2
  exit 2
}

vm_us() { echo "${EPOCHREALTIME/./}"; }
vm_since() { # seconds since a vm_us stamp, one decimal
  local us=$(($(vm_us) - $1))
  printf '%d.%d' $((us / 1000000)) $(((us / 100000) % 10))
}

vm_lock() { # one build / guest start or stop at a time per BALLAST_VM_DIR (ports, the base image)
  [[ ${VM_LOCK_HELD:-} == "$VM_DIR" ]] && return 0 # a parent script holds it (build-image.sh from up-guest.sh)
  mkdir -p "$VM_DIR"
  exec 8>"$VM_DIR/.lock"
  flock -w 1800 8 || vm_die "another script holds $VM_DIR/.lock for over 30 min"
  export VM_LOCK_HELD=$VM_DIR
}

vm_unlock() {
  exec 8>&-
  unset VM_LOCK_HELD
}

vm_set_node() {
  [[ $1 =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || vm_die "node name must be a DNS label: $1"
  NODE=$1
  GDIR=$VM_DIR/guests/$NODE
}

# vm_binary NAME: $KUBELET / $KUBECTL when set, else kubelet/kubectl unpacked from K8S/NAME.xz into cache/,
# checked against K8S/SHA256SUMS
vm_binary() {
  local name=$1 want have out=$VM_DIR/cache/$1 var
  var=${1^^}
  if [[ -n ${!var:-} ]]; then
    [[ -x ${!var} ]] || vm_die "$var=${!var} is not an executable"
    echo "${!var}"
    return
  fi
  want=$(awk -v n="$name" '$2 == n {print $1}' "$K8S/SHA256SUMS" 2>/dev/null)
  [[ -n $want ]] || vm_die "no $name line in $K8S/SHA256SUMS (set K8S to the folder with kubelet.xz)"
  if [[ -x $out ]] && [[ $(cat "$out.sha256" 2>/dev/null) == "$want" ]]; then
    echo "$out"
    return
  fi
  [[ -f $K8S/$name.xz ]] || vm_die "no $K8S/$name.xz"
  mkdir -p "$VM_DIR/cache"
  xz -dc "$K8S/$name.xz" >"$out.tmp"
  have=$(sha256sum <"$out.tmp" | cut -d' ' -f1)
  [[ $have == "$want" ]] || { rm -f "$out.tmp"; vm_die "$name.xz unpacks to sha256 $have, SHA256SUMS says $want"; }
  chmod 755 "$out.tmp" && mv "$out.tmp" "$out" && echo "$want" >"$out.sha256"
  echo "$out"
}

vm_kubectl() { # needs KUBECONFIG_FILE
  local k=${KUBECTL:-}
  if [[ -z $k ]]; then
    if [[ -f $K8S/kubectl.xz ]]; then k=$(vm_binary kubectl); else k=$(command -v kubectl) || vm_die "no kubectl"; fi
    KUBECTL=$k
  fi
  "$k" --kubeconfig "$KUBECONFIG_FILE" --request-timeout 15s "$@"
}

vm_port_busy() { [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }

# vm_pick_port FIRST LAST: the first port of the range that nothing listens on and no guest has recorded
vm_pick_port() {
  local p taken
  taken=$(cat "$VM_DIR"/guests/*/ports 2>/dev/null | tr -c '0-9\n' '\n')
  for ((p = $1; p <= $2; p++)); do
    grep -qx "$p" <<<"$taken" && continue
    vm_port_busy "$p" || { echo "$p"; return 0; }
  done
  return 1
}

vm_qemu_pid() { # the pid of NODE's running QEMU (checked against the binary); fails when none runs
  local pid exe
  [[ -s $GDIR/qemu.pid ]] || return 1
  read -r pid <"$GDIR/qemu.pid" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ ${exe##*/} == qemu-system-* ]] || return 1
  echo "$pid"
}

vm_ssh() { # vm_ssh COMMAND...: as root in guest NODE over its forwarded ssh port (GDIR/ports); VM_SSH_OPTS
  local port
  port=$(awk -F= '$1 == "SSH_PORT" {print $2}' "$GDIR/ports" 2>/dev/null)
  [[ -n $port ]] || vm_die "no guest $NODE (no $GDIR/ports)"
  ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes \
    -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=6 -i "$SSH_KEY" -p "$port" "${VM_SSH_OPTS[@]}" root@127.0.0.1 "$@"
}

# vm_apt_sources: APT_MAIN / APT_SECURITY, the Debian mirror and security mirror of THIS machine's apt
# configuration (deb822 /etc/apt/sources.list.d/*.sources, else one-line sources.list and *.list): the entries
# whose suite is the host's codename (or SUITE) with an optional -updates/-backports tail, resp. -security.
# APT_MIRROR / APT_SECURITY_MIRROR override. No host name is written into this recipe.
vm_apt_sources() {
  local host_cn files=() f
  host_cn=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  for f in /etc/apt/sources.list.d/*.sources; do [[ -r $f ]] && files+=("$f"); done
  local found
  found=$(
    {
      ((${#files[@]})) && awk '
        function flush() { if (uris != "" && types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") print uris "\t" suites; uris = suites = types = enabled = "" }
        FNR == 1 { flush() }
        /^[ \t]*$/ { flush(); next }
        /^#/ { next }
        { k = $1; sub(/:$/, "", k); $1 = ""; sub(/^ +/, "") }
        k == "URIs" { uris = $0 } k == "Suites" { suites = $0 } k == "Types" { types = $0 } k == "Enabled" { enabled = $0 }
        END { flush() }' "${files[@]}"
      for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } print $i "\t" $(i + 1) }' "$f"
      done
    } 2>/dev/null
  )
  APT_MAIN=${APT_MIRROR:-} APT_SECURITY=${APT_SECURITY_MIRROR:-}
  local uris suites s
  while IFS=$'\t' read -r uris suites; do
    for s in $suites; do
      if [[ $s =~ ^($host_cn|$SUITE)(-security|/updates)$ ]]; then
        [[ -n $APT_SECURITY ]] || APT_SECURITY=${uris%% *}
      elif [[ -z $APT_MAIN && $s =~ ^($host_cn|$SUITE)(-updates|-backports)?$ ]]; then
        APT_MAIN=${uris%% *}
      fi
    done
  done <<<"$found"
  [[ -n $APT_MAIN ]] || vm_die "no Debian mirror in this machine's apt configuration (/etc/apt/sources.list.d/*.sources" \
    "or /etc/apt/sources.list with suite ${host_cn:-?} or $SUITE); set APT_MIRROR=<uri of a Debian mirror>"
  APT_MAIN=${APT_MAIN%/} APT_SECURITY=${APT_SECURITY%/}
}

# vm_apt_proxy_opts: mmdebstrap --aptopt arguments for this machine's apt proxy settings, if any
vm_apt_proxy_opts() {
  APT_OPTS=()
  local line
  while read -r line; do
    APT_OPTS+=(--aptopt="$line")
  done < <(apt-config dump 2>/dev/null | grep -iE '^Acquire::(https?|ftp|socks)::Proxy' || true)
}
