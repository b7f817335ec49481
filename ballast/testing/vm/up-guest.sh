#!/usr/bin/env bash
# Starts node NODE as a QEMU guest (Debian SUITE, systemd, cgroup v2, containerd, the kubelet) joined to the
# loopback API server that KUBECONFIG names (the rig's admin kubeconfig), and waits until the Node is Ready with
# this boot's bootID. Idempotent: a running guest is only waited for.
#
#   bash up-guest.sh NODE KUBECONFIG
#
# Env: CA_CERT, CA_KEY (the cluster CA that mints the node's client and serving certificates; default
# pki/ca.crt and pki/ca.key beside KUBECONFIG), APISERVER_PORT and TLS_SERVER_NAME (default: port and host of
# KUBECONFIG's server; the guest dials 10.0.2.2:PORT, slirp's address of the host's loopback), SMP (1),
# MEM (MiB, 1536), SSH_PORT / KUBELET_PORT (127.0.0.1 forwards; default the first free of 31022-31099 /
# 31250-31299), ACCEL (auto: kvm only on hardware-assisted KVM, else tcg; kvm; tcg), TCG_THREAD (multi;
# single: all vCPUs on one host thread, no cross-vCPU code-patching races, slower), KUBELET_V (1),
# READY_TIMEOUT (s, 900), MAX_GUESTS (2) and MAX_GUEST_MEM (MiB, all guests, 3072): 0 = no limit; the kubelet's
# first settings: CGROUP_ROOT (/), CPU_MANAGER_POLICY (none; static), RESERVED_CPUS (0, for static), kept in the
# guest's /etc/kubernetes/kubelet-settings (change it there and restart the kubelet for others); SUITE, KUBELET,
# KUBECTL, K8S, IMAGES as for build-image.sh (run first; a no-op when the image is up to date).
# Writes only $BALLAST_VM_DIR/guests/NODE: disk.qcow2 (overlay on the shared base, kept across guest reboots),
# seed.tar (the guest's own files), pki/, console.log, qemu.pid, ports, guest.env, boot.txt.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-guest.sh"
(($# == 2)) || vm_usage
vm_set_node "$1"
KUBECONFIG_FILE=$(cd "$(dirname "$2")" && pwd -P)/$(basename "$2")
[[ -r $KUBECONFIG_FILE ]] || vm_die "no kubeconfig $2"
for t in qemu-system-x86_64 qemu-img ssh ssh-keygen openssl ss flock; do
  command -v "$t" >/dev/null || vm_die "no $t: apt-get install qemu-system-x86 qemu-utils openssh-client openssl iproute2 util-linux"
done
SMP=${SMP:-1} MEM=${MEM:-1536} READY_TIMEOUT=${READY_TIMEOUT:-900} KUBELET_V=${KUBELET_V:-1}
MAX_GUESTS=${MAX_GUESTS:-2} MAX_GUEST_MEM=${MAX_GUEST_MEM:-3072}
CA_CERT=${CA_CERT:-$(dirname "$KUBECONFIG_FILE")/pki/ca.crt}
CA_KEY=${CA_KEY:-$(dirname "$KUBECONFIG_FILE")/pki/ca.key}
server=$(awk '$1 == "server:" {print $2; exit}' "$KUBECONFIG_FILE")
[[ $server =~ ^https://(\[[^]]+\]|[^:/]+):([0-9]+) ]] || vm_die "cannot read host:port of KUBECONFIG's server ($server)"
APISERVER_PORT=${APISERVER_PORT:-${BASH_REMATCH[2]}}
TLS_SERVER_NAME=${TLS_SERVER_NAME:-${BASH_REMATCH[1]}}
case $TLS_SERVER_NAME in 127.* | localhost | \[::1\]) ;; *)
  echo "note: KUBECONFIG's server is $server; the guest reaches only the host's loopback ($HOST_IP:$APISERVER_PORT)" ;;
esac
t_all=$(vm_us)

wait_ready() { # wait_ready START_US: ssh answers, then the Node is Ready with the guest's current bootID
  local t0=$1 boot ready deadline=$((SECONDS + READY_TIMEOUT))
  until boot=$(vm_ssh cat /proc/sys/kernel/random/boot_id 2>/dev/null); do
    ((SECONDS < deadline)) || { tail -30 "$GDIR/console.log" >&2; vm_die "$NODE: no ssh after $READY_TIMEOUT s (console above)"; }
    vm_qemu_pid >/dev/null || { tail -30 "$GDIR/console.log" >&2; vm_die "$NODE: QEMU exited (console above)"; }
    sleep 1
  done
  T_SSH=$(vm_since "$t0")
  until [[ $(vm_kubectl get node "$NODE" -o 'jsonpath={.status.nodeInfo.bootID} {.status.conditions[?(@.type=="Ready")].status}' \
    2>/dev/null) == "$boot True" ]]; do
    ((SECONDS < deadline)) || { vm_ssh journalctl -u kubelet -n 30 --no-pager >&2 || true; vm_die "$NODE: not Ready after $READY_TIMEOUT s"; }
    sleep 1
  done
  T_READY=$(vm_since "$t0")
}

if pid=$(vm_qemu_pid); then
  t0=$(vm_us)
  wait_ready "$t0"
  echo "$NODE: running (qemu pid $pid), Ready; $(cat "$GDIR/ports" | tr '\n' ' ')"
  exit 0
fi

bash "$VM_RECIPE/build-image.sh"
[[ -s $IMG_DIR/disk.img ]] || vm_die "no image $IMG_DIR/disk.img"

vm_lock
# --- limits, ports --------------------------------------------------------------------------------------------
n=0 mem=0
for d in "$VM_DIR"/guests/*/; do
  [[ -f $d/guest.env ]] || continue
  [[ $(basename "$d") == "$NODE" ]] && continue
  GDIR=${d%/} vm_qemu_pid >/dev/null || continue
  n=$((n + 1)) mem=$((mem + $(awk -F= '$1 == "MEM" {print $2}' "$d/guest.env")))
done
((MAX_GUESTS == 0 || n < MAX_GUESTS)) || vm_die "$n guests run already (MAX_GUESTS=$MAX_GUESTS)"
((MAX_GUEST_MEM == 0 || mem + MEM <= MAX_GUEST_MEM)) || vm_die "guests have $mem MiB, $MEM more exceeds MAX_GUEST_MEM=$MAX_GUEST_MEM"
rm -rf "$GDIR"
mkdir -p "$GDIR/pki" "$VM_DIR/pki"
SSH_PORT=${SSH_PORT:-$(vm_pick_port 31022 31099)} || vm_die "no free port in 31022-31099 (set SSH_PORT)"
printf 'SSH_PORT=%s\n' "$SSH_PORT" >"$GDIR/ports"
KUBELET_PORT=${KUBELET_PORT:-$(vm_pick_port 31250 31299)} || vm_die "no free port in 31250-31299 (set KUBELET_PORT)"
printf 'KUBELET_PORT=%s\n' "$KUBELET_PORT" >>"$GDIR/ports"
for p in "$SSH_PORT" "$KUBELET_PORT"; do vm_port_busy "$p" && vm_die "port $p is taken"; done

# --- the guest's own files: certificates, kubeconfig, node name, ssh key -> seed.tar ------------------------------
[[ -r $CA_CERT && -r $CA_KEY ]] || vm_die "no CA certificate/key ($CA_CERT, $CA_KEY): set CA_CERT and CA_KEY"
[[ -s $SSH_KEY ]] || ssh-keygen -q -t ed25519 -N '' -C ballast-vm -f "$SSH_KEY"
mint() { # mint NAME SUBJECT EXTENSIONS
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$GDIR/pki/$1.key" -subj "$2" \
    -out "$GDIR/pki/$1.csr" 2>/dev/null
  openssl x509 -req -in "$GDIR/pki/$1.csr" -CA "$CA_CERT" -CAkey "$CA_KEY" -set_serial "0x$(openssl rand -hex 16)" \
    -days 365 -extfile <(printf '%b' "$3") -out "$GDIR/pki/$1.crt" 2>/dev/null || vm_die "could not sign with $CA_KEY"
  rm -f "$GDIR/pki/$1.csr"
}
mint kubelet-client "/O=system:nodes/CN=system:node:$NODE" \
  'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n'
mint kubelet "/CN=$NODE" \
  "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:$NODE,IP:127.0.0.1,IP:$GUEST_IP\n"
s=$GDIR/seed
mkdir -p "$s/etc/kubernetes/pki" "$s/etc/default" "$s/root/.ssh"
chmod 700 "$s/etc/kubernetes/pki" "$s/root/.ssh"
install -m 644 "$CA_CERT" "$s/etc/kubernetes/pki/ca.crt"
install -m 644 "$GDIR/pki/kubelet-client.crt" "$GDIR/pki/kubelet.crt" "$s/etc/kubernetes/pki/"
install -m 600 "$GDIR/pki/kubelet-client.key" "$GDIR/pki/kubelet.key" "$s/etc/kubernetes/pki/"
install -m 600 "$SSH_KEY.pub" "$s/root/.ssh/authorized_keys"
cat >"$s/etc/kubernetes/kubelet.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rig
  cluster:
    server: https://$HOST_IP:$APISERVER_PORT
    certificate-authority: /etc/kubernetes/pki/ca.crt
    tls-server-name: $TLS_SERVER_NAME
users:
- name: $NODE
  user:
    client-certificate: /etc/kubernetes/pki/kubelet-client.crt
    client-key: /etc/kubernetes/pki/kubelet-client.key
contexts:
- name: default
  context: {cluster: rig, user: $NODE}
current-context: default
EOF
printf 'NODE_NAME=%s\nKUBELET_V=%s\n' "$NODE" "$KUBELET_V" >"$s/etc/default/kubelet"
printf 'APISERVER_PORT=%s\n' "$APISERVER_PORT" >"$s/etc/default/ballast-guest"
printf 'CGROUP_ROOT=%s\nCPU_MANAGER_POLICY=%s\nRESERVED_CPUS=%s\n' "${CGROUP_ROOT:-/}" "${CPU_MANAGER_POLICY:-none}" \
  "${RESERVED_CPUS:-0}" >"$s/etc/kubernetes/kubelet-settings"
echo "$NODE" >"$s/etc/hostname"
printf '127.0.0.1 localhost\n%s %s\n' "$GUEST_IP" "$NODE" >"$s/etc/hosts"
tar --owner=0 --group=0 --numeric-owner -C "$s" -cf "$GDIR/seed.tar" etc root
rm -rf "$s"

# --- overlay, QEMU -------------------------------------------------------------------------------------------------
qemu-img create -q -f qcow2 -b "$IMG_DIR/disk.img" -F raw "$GDIR/disk.qcow2"
accel=${ACCEL:-auto}
if [[ $accel == auto ]]; then
  if [[ -w /dev/kvm && (-d /sys/module/kvm_intel || -d /sys/module/kvm_amd) ]]; then accel=kvm; else accel=tcg; fi
fi
case $accel in
kvm) accel_args=(-accel kvm -cpu host) ;;
tcg) accel_args=(-accel "tcg,thread=${TCG_THREAD:-multi},tb-size=256" -cpu max) ;;
*) vm_die "ACCEL must be auto, kvm or tcg" ;;
esac
printf 'SUITE=%s\nSMP=%s\nMEM=%s\nACCEL=%s\nAPISERVER_PORT=%s\n' "$SUITE" "$SMP" "$MEM" "$accel" "$APISERVER_PORT" >"$GDIR/guest.env"
cmdline="root=/dev/vda rw console=ttyS0 psi=1 net.ifnames=0 mitigations=off systemd.hostname=$NODE ${EXTRA_CMDLINE:-}"
t0=$(vm_us)
qemu-system-x86_64 -name "ballast-$NODE" -nodefaults -no-user-config -machine q35 "${accel_args[@]}" \
  -smp "$SMP" -m "$MEM" -kernel "$IMG_DIR/vmlinuz" -initrd "$IMG_DIR/initrd.img" -append "$cmdline" \
  -drive "if=none,id=root,file=$GDIR/disk.qcow2,format=qcow2,cache=unsafe,discard=unmap" -device virtio-blk-pci,drive=root \
  -drive "if=none,id=seed,file=$GDIR/seed.tar,format=raw,readonly=on" -device virtio-blk-pci,drive=seed,serial=ballast-seed \
  -netdev "user,id=n0,ipv6=off,net=10.0.2.0/24,host=$HOST_IP,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22,hostfwd=tcp:127.0.0.1:$KUBELET_PORT-:10250" \
  -device virtio-net-pci,netdev=n0 -device virtio-rng-pci \
  -display none -vga none -serial "file:$GDIR/console.log" -monitor none \
  -daemonize -pidfile "$GDIR/qemu.pid" 8>&- || vm_die "QEMU did not start"
vm_unlock
pid=$(vm_qemu_pid) || vm_die "QEMU exited at once"
echo "$NODE: qemu pid $pid, accel $accel, $SMP vCPU, $MEM MiB, ssh 127.0.0.1:$SSH_PORT, kubelet https://127.0.0.1:$KUBELET_PORT"
wait_ready "$t0"
echo "qemu start -> ssh $T_SSH s, -> Node Ready $T_READY s; up-guest.sh $(vm_since "$t_all") s in all" | tee "$GDIR/boot.txt"
