#!/usr/bin/env bash
# Builds the guests' shared base image into $BALLAST_VM_DIR/images/SUITE/ (disk.img: raw ext4, vmlinuz,
# initrd.img, build.txt, versions.txt); nothing is written elsewhere. up-guest.sh runs it; it does nothing when
# the image is up to date (stamp of its inputs), and refuses to replace an image that guests still use.
#
#   bash build-image.sh        # env: SUITE (trixie; bookworm), KERNEL_PKG, DISK_SIZE (4G), KUBELET or K8S
#
# 1. base-SUITE: mmdebstrap (minbase) of Debian SUITE from THIS machine's apt mirror and proxy (lib-guest.sh
#    vm_apt_sources; APT_MIRROR overrides): systemd, udev, containerd, runc, CNI plugins, busybox-static,
#    openssh-server, iptables, the cloud kernel (KERNEL_PKG, default linux-image-cloud-amd64, else
#    linux-image-amd64). Kept, rebuilt only when the suite or package list changes.
# 2. a copy of it gets what every guest shares: the kubelet (KUBELET, else K8S/kubelet.xz, sha256-checked), its
#    KubeletConfiguration (systemd cgroup driver; cgroupRoot and the CPU manager from each guest's settings,
#    rendered at every kubelet start), containerd's config (version 2, SystemdCgroup, NRI on: the NRI table of
#    `containerd config default` of the guest's own containerd, with disable = false), a bridge CNI network,
#    the images localhost/ballast-pause:1 + localhost/ballast-busybox:1 (imported on first boot), units that
#    install the guest's own files from its seed disk (up-guest.sh), a static address, no DNS, no time sync,
#    no apt timers, and what a real node's kube-proxy and network give its pods (ballast-service-net: the
#    `kubernetes` Service address DNATed to the API server, pod traffic masqueraded out of the guest).
#    IMAGES (image archives, OCI or docker, space-separated: the agent's image for the tests) are imported on
#    this machine, at its speed, by a containerd of the build's own whose root is the guest's
#    /var/lib/containerd: every guest boots with them unpacked in its containerd (k8s.io namespace). Importing
#    an 80 MB image inside a guest took over 10 minutes under emulation on a loaded machine, 36 s here.
# 3. disk.img by mkfs.ext4 -d (no loop mounts, no root-only tools beyond chroot).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-guest.sh"
(($# == 0)) || vm_usage
((EUID == 0)) || vm_die "run as root (mmdebstrap --mode=root, chroot)"
for t in mmdebstrap mkfs.ext4 xz openssl flock sha256sum; do
  command -v "$t" >/dev/null || vm_die "no $t: apt-get install mmdebstrap e2fsprogs xz-utils openssl util-linux"
done
KERNEL_PKG=${KERNEL_PKG:-linux-image-cloud-amd64}
DISK_SIZE=${DISK_SIZE:-4G}
t0=$(vm_us)
vm_lock
mkdir -p "$VM_DIR/build" "$VM_DIR/cache" "$VM_DIR/logs" "$IMG_DIR"

# --- inputs and stamp ---------------------------------------------------------------------------------------
PKGS=(systemd-sysv dbus udev kmod iproute2 procps ca-certificates initramfs-tools
  containerd runc containernetworking-plugins busybox-static openssh-server iptables)
base=$VM_DIR/build/base-$SUITE
vm_apt_sources
vm_apt_proxy_opts
base_stamp="$SUITE $KERNEL_PKG ${PKGS[*]} | $APT_MAIN $APT_SECURITY"
kubelet=$(vm_binary kubelet)
read -r -a images <<<"${IMAGES:-}"
for i in "${images[@]}"; do
  [[ -r $i ]] || vm_die "no image archive $i (IMAGES)"
done
if ((${#images[@]})); then
  for t in containerd ctr; do
    command -v "$t" >/dev/null || vm_die "no $t (IMAGES are imported by this machine's containerd): apt-get install containerd"
  done
fi
stamp=$( {
  echo "$base_stamp" "$DISK_SIZE"
  sha256sum <"$kubelet"
  for i in "${images[@]}"; do sha256sum <"$i"; done
  cat "$VM_RECIPE/build-image.sh" "$VM_RECIPE/lib-guest.sh" "$PAUSE_C" 2>/dev/null
} | sha256sum | cut -d' ' -f1)
if [[ -s $IMG_DIR/disk.img && $(cat "$IMG_DIR/stamp" 2>/dev/null) == "$stamp" ]]; then
  echo "image: up to date ($IMG_DIR)"
  exit 0
fi
users=()
for g in "$VM_DIR"/guests/*/guest.env; do
  [[ -f $g ]] && grep -qx "SUITE=$SUITE" "$g" && users+=("$(basename "$(dirname "$g")")")
done
((${#users[@]} == 0)) || vm_die "the $SUITE image must be rebuilt, but guests use it: ${users[*]} (down-guest.sh them first)"

# --- 1. base ------------------------------------------------------------------------------------------------
if [[ -d $base && $(cat "$base.stamp" 2>/dev/null) == "$base_stamp" ]]; then
  echo "base: up to date ($base)"
else
  t1=$(vm_us)
  rm -rf "$base.new" "$base.stamp"
  sources=("deb $APT_MAIN $SUITE main" "deb $APT_MAIN $SUITE-updates main")
  if [[ -n $APT_SECURITY ]]; then sources+=("deb $APT_SECURITY $SUITE-security main"); else echo "note: no security mirror"; fi
  echo "base: mmdebstrap $SUITE from $APT_MAIN${APT_SECURITY:+ + $APT_SECURITY} (log $VM_DIR/logs/mmdebstrap-$SUITE.log)"
  # the kernel in a hook: the cloud flavour where the suite has it, else the generic one
  kernel_hook='chroot "$1" sh -c "apt-get install -y --no-install-recommends '"$KERNEL_PKG"' || apt-get install -y --no-install-recommends linux-image-amd64"'
  if ! nice -n 10 mmdebstrap --mode=root --variant=minbase --components=main \
    --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='APT::Install-Recommends "false"' "${APT_OPTS[@]}" \
    --include="$(IFS=,; echo "${PKGS[*]}")" --customize-hook="$kernel_hook" \
    --customize-hook='chroot "$1" apt-get clean' \
    "$SUITE" "$base.new" "${sources[@]}" >"$VM_DIR/logs/mmdebstrap-$SUITE.log" 2>&1; then
    tail -25 "$VM_DIR/logs/mmdebstrap-$SUITE.log" >&2
    vm_die "mmdebstrap failed (log above)"
  fi
  rm -rf "$base" && mv "$base.new" "$base"
  echo "$base_stamp" >"$base.stamp"
  echo "base: built in $(vm_since "$t1") s, $(du -sh "$base" | cut -f1)"
fi

# --- 2. rootfs ----------------------------------------------------------------------------------------------
r=$VM_DIR/build/rootfs-$SUITE
rm -rf "$r"
cp -a "$base" "$r"
trap 'rm -rf "$r"' EXIT
ls "$r"/boot/vmlinuz-* >/dev/null 2>&1 || vm_die "no kernel in the base (see $VM_DIR/logs/mmdebstrap-$SUITE.log)"
install -D -m 755 "$kubelet" "$r/usr/local/bin/kubelet"
install -d -m 700 "$r/etc/kubernetes/pki" "$r/root/.ssh"
install -d "$r/var/lib/kubelet" "$r/etc/containerd" "$r/etc/cni/net.d" "$r/var/lib/ballast/images" "$r/etc/nri/conf.d" \
  "$r/opt/nri/plugins"

# the settings every guest shares; ballast-kubelet-config adds each guest's own (cgroupRoot, CPU manager) at
# every kubelet start, writing /var/lib/kubelet/config.yaml in place (its inode stays: a single-file hostPath
# mount of it, as the agent's DaemonSet has, keeps seeing it)
cat >"$r/etc/kubernetes/kubelet-base.yaml" <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: systemd
cgroupsPerQOS: true
failSwapOn: false
staticPodPath: ""
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: /etc/kubernetes/pki/kubelet.crt
tlsPrivateKeyFile: /etc/kubernetes/pki/kubelet.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
  imagefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
EOF
# each guest's own kubelet settings; the seed's copy is installed only on the first boot, so what a test
# changes later (Guest.configure_kubelet) survives a reboot
printf 'CGROUP_ROOT=/\nCPU_MANAGER_POLICY=none\nRESERVED_CPUS=0\n' >"$r/etc/kubernetes/kubelet-settings"
cat >"$r/usr/local/sbin/ballast-kubelet-config" <<'EOF'
#!/bin/sh
# renders /var/lib/kubelet/config.yaml from /etc/kubernetes/kubelet-base.yaml and this guest's settings
# (/etc/kubernetes/kubelet-settings: CGROUP_ROOT, CPU_MANAGER_POLICY, RESERVED_CPUS) before every kubelet start.
# A cgroupRoot other than / must exist before the kubelet starts: with the systemd driver it is a slice
# (/a/b -> a.slice/a-b.slice, a '-' inside a name becoming '_'), started here. A changed CPU manager policy
# drops the kubelet's CPU and memory manager checkpoints (the kubelet refuses to start with another's).
set -eu
. /etc/kubernetes/kubelet-settings
root=${CGROUP_ROOT:-/}
policy=${CPU_MANAGER_POLICY:-none}
case $root in /*) ;; *) echo "CGROUP_ROOT must be absolute: $root" >&2; exit 1 ;; esac
case $policy in none | static) ;; *) echo "CPU_MANAGER_POLICY must be none or static: $policy" >&2; exit 1 ;; esac
if [ "$root" != / ]; then
  slice=
  for part in $(echo "$root" | tr '/' ' '); do
    part=$(echo "$part" | tr '-' '_')
    slice=${slice:+$slice-}$part
  done
  systemctl start "$slice.slice"
fi
state=/var/lib/kubelet/cpu_manager_state
if [ -f $state ] && ! grep -q "\"policyName\":\"$policy\"" $state; then
  rm -f $state /var/lib/kubelet/memory_manager_state
fi
new=$(mktemp)
{
  cat /etc/kubernetes/kubelet-base.yaml
  echo "cgroupRoot: $root"
  echo "cpuManagerPolicy: $policy"
  if [ "$policy" = static ]; then echo "reservedSystemCPUs: \"${RESERVED_CPUS:-0}\""; fi
} >"$new"
cmp -s "$new" /var/lib/kubelet/config.yaml || cat "$new" >/var/lib/kubelet/config.yaml
rm -f "$new"
EOF
chmod 755 "$r/usr/local/sbin/ballast-kubelet-config"
: >"$r/var/lib/kubelet/config.yaml"

cat >"$r/etc/systemd/system/kubelet.service" <<EOF
[Unit]
Description=kubelet (node name, kubeconfig and certificates from the seed disk)
Wants=containerd.service ballast-images.service
Requires=ballast-seed.service
After=containerd.service ballast-images.service ballast-seed.service ballast-net.service ballast-service-net.service

[Service]
EnvironmentFile=/etc/default/kubelet
ExecStartPre=/usr/local/sbin/ballast-kubelet-config
ExecStart=/usr/local/bin/kubelet --config /var/lib/kubelet/config.yaml --kubeconfig /etc/kubernetes/kubelet.conf --hostname-override \${NODE_NAME} --node-ip $GUEST_IP --v \${KUBELET_V}
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
EOF

# containerd: its own defaults decide the NRI table (1.7: disable = true there); we turn it on
chroot "$r" containerd config default >"$VM_DIR/build/containerd-default-$SUITE.toml" 2>/dev/null || true
nri=$(awk '/^ *\[plugins\."io\.containerd\.nri\.v1\.nri"\]/ {on = 1; print; next} on && /^ *\[/ {exit} on' \
  "$VM_DIR/build/containerd-default-$SUITE.toml" | sed -E 's/^( *)disable = true/\1disable = false/')
cat >"$r/etc/containerd/config.toml" <<EOF
version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "localhost/ballast-pause:1"
    enable_selinux = false
    disable_apparmor = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1
$nri
EOF
if [[ -n $nri ]]; then echo "containerd: NRI table of its defaults, enabled:"; sed 's/^/  /' <<<"$nri"; else
  echo "note: this containerd has no NRI table in its defaults (containerd < 1.7): NRI stays off"
fi
[[ -x $r/usr/lib/cni/bridge ]] || vm_die "no /usr/lib/cni/bridge in the guest (containernetworking-plugins)"
cat >"$r/etc/cni/net.d/10-bridge.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "ballast-bridge", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
printf 'overlay\nbridge\n' >"$r/etc/modules-load.d/k8s.conf"

# images: docker-archive tarballs (manifest.json + config + one layer), as ../node/up-node.sh makes them
make_image() { # make_image OUT.tar REF ROOTFS CONFIG-JSON
  local o=$1 ref=$2 root=$3 cfg=$4 w diff conf
  w=$(mktemp -d "$VM_DIR/build/.img.XXXXXX")
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$w/layer.tar" .
  diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  mkdir "$w/$diff" && mv "$w/layer.tar" "$w/$diff/layer.tar"
  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$cfg" "$diff" >"$w/config.json"
  conf=$(sha256sum "$w/config.json" | cut -d' ' -f1)
  mv "$w/config.json" "$w/$conf.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$conf" "$ref" "$diff" >"$w/manifest.json"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$w" -cf "$o" manifest.json "$conf.json" "$diff"
  rm -rf "$w"
}
w=$(mktemp -d "$VM_DIR/build/.imgroot.XXXXXX")
bb=$r/bin/busybox # the guest's busybox-static
mkdir -p "$w/bb/bin" "$w/bb/etc" "$w/bb/proc" "$w/bb/sys" "$w/bb/dev" "$w/bb/tmp" "$w/pause"
chmod 1777 "$w/bb/tmp"
cp "$bb" "$w/bb/bin/busybox"
for a in $("$bb" --list-full); do
  [[ $a == bin/busybox ]] && continue
  mkdir -p "$w/bb/$(dirname "$a")"
  ln -sf /bin/busybox "$w/bb/$a"
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$w/bb/etc/passwd"
echo 'root:x:0:' >"$w/bb/etc/group"
make_image "$r/var/lib/ballast/images/busybox.tar" localhost/ballast-busybox:1 "$w/bb" \
  '{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"]}'
if command -v cc >/dev/null && cc -static -Os -s -o "$w/pause/pause" "$PAUSE_C" 2>/dev/null; then
  make_image "$r/var/lib/ballast/images/pause.tar" localhost/ballast-pause:1 "$w/pause" '{"Entrypoint":["/pause"]}'
else # no C compiler (or no static libc): a busybox loop
  mkdir -p "$w/pause/bin" && cp "$bb" "$w/pause/bin/busybox"
  make_image "$r/var/lib/ballast/images/pause.tar" localhost/ballast-pause:1 "$w/pause" \
    '{"Entrypoint":["/bin/busybox","sh","-c","trap \"exit 0\" TERM INT; while :; do /bin/busybox sleep 3600 & wait $!; done"]}'
fi
rm -rf "$w"

# IMAGES: unpacked into the guest's containerd root by a containerd of this build's own (the host's; 1.6 on
# Debian 12 writes what the guest's 1.7 reads), stopped by its pid
if ((${#images[@]})); then
  c=$VM_DIR/build/ctrd
  rm -rf "$c" && mkdir -p "$c" "$r/var/lib/containerd"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$r/var/lib/containerd"
state = "$c/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$c/c.sock"
EOF
  containerd --config "$c/config.toml" >"$VM_DIR/logs/build-containerd.log" 2>&1 8>&- &
  ctrd=$!
  stop_ctrd() { kill "$ctrd" 2>/dev/null && wait "$ctrd" 2>/dev/null; rm -rf "$r"; }
  trap stop_ctrd EXIT
  for _ in $(seq 1 100); do ctr -a "$c/c.sock" version >/dev/null 2>&1 && break; sleep 0.2; done
  for i in "${images[@]}"; do
    ctr -a "$c/c.sock" -n k8s.io images import "$i" >/dev/null || vm_die "ctr import $i failed (log $VM_DIR/logs/build-containerd.log)"
  done
  echo "images: $(ctr -a "$c/c.sock" -n k8s.io images ls -q | tr '\n' ' ')into the guest's containerd"
  kill "$ctrd" && wait "$ctrd" || true
  trap 'rm -rf "$r"' EXIT
  rm -rf "$c" "$r/var/lib/containerd/tmpmounts"
fi

# units of the guest's own: seed files, address, images
cat >"$r/usr/local/sbin/ballast-seed" <<'EOF'
#!/bin/sh
# installs this guest's own files (node name, kubeconfig, certificates, ssh key) from the seed disk, a plain
# tar archive attached by up-guest.sh as a read-only virtio disk with serial ballast-seed
set -eu
dev=/dev/disk/by-id/virtio-ballast-seed
i=0
until [ -b $dev ]; do i=$((i + 1)); [ $i -lt 600 ] || { echo "no seed disk $dev" >&2; exit 1; }; sleep 0.2; done
tar -x --no-overwrite-dir --exclude etc/kubernetes/kubelet-settings -f $dev -C /
# the kubelet's settings only on the first boot: a test may have changed them since
[ -f /etc/kubernetes/.seeded ] || tar -x --no-overwrite-dir -f $dev -C / etc/kubernetes/kubelet-settings
touch /etc/kubernetes/.seeded
hostname "$(cat /etc/hostname)"
EOF
cat >"$r/usr/local/sbin/ballast-import-images" <<'EOF'
#!/bin/sh
# imports the node's local images into containerd's k8s.io namespace (nothing is ever pulled)
set -eu
i=0
until ctr version >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 240 ] || exit 1; sleep 0.5; done
have=$(ctr -n k8s.io images ls -q)
for p in pause:localhost/ballast-pause:1 busybox:localhost/ballast-busybox:1; do
  echo "$have" | grep -qxF "${p#*:}" || ctr -n k8s.io images import "/var/lib/ballast/images/${p%%:*}.tar"
done
EOF
chmod 755 "$r/usr/local/sbin/ballast-seed" "$r/usr/local/sbin/ballast-import-images"
cat >"$r/etc/systemd/system/ballast-seed.service" <<'EOF'
[Unit]
Description=this guest's own files from its seed disk
After=local-fs.target
Before=ssh.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/ballast-seed

[Install]
WantedBy=multi-user.target
EOF
cat >"$r/etc/systemd/system/ballast-net.service" <<EOF
[Unit]
Description=static address on the slirp network (no DHCP, no DNS, no default route)
DefaultDependencies=no
Wants=network.target
Before=network.target
BindsTo=sys-subsystem-net-devices-eth0.device
After=sys-subsystem-net-devices-eth0.device

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=ip link set eth0 up
ExecStart=ip addr replace $GUEST_IP/24 dev eth0

[Install]
WantedBy=multi-user.target
EOF
# what a real node's kube-proxy and network give its pods, for the test control plane on the host's loopback:
# the `kubernetes` Service address DNATed to the API server (10.0.2.2:APISERVER_PORT, from the seed), also for
# the guest's own processes (OUTPUT, with a route to the Service range), and pod traffic masqueraded out of the
# guest (slirp answers only the guest's own address)
cat >"$r/usr/local/sbin/ballast-service-net" <<EOF
#!/bin/sh
set -eu
. /etc/default/ballast-guest
sysctl -qw net.ipv4.ip_forward=1
ip route replace ${SERVICE_IP%.*}.0/24 via $HOST_IP dev eth0
for t in PREROUTING OUTPUT POSTROUTING; do
  iptables -w -t nat -N BALLAST-\$t 2>/dev/null || iptables -w -t nat -F BALLAST-\$t
  iptables -w -t nat -C \$t -j BALLAST-\$t 2>/dev/null || iptables -w -t nat -I \$t -j BALLAST-\$t
done
for t in PREROUTING OUTPUT; do
  iptables -w -t nat -A BALLAST-\$t -d $SERVICE_IP/32 -p tcp --dport 443 -j DNAT --to-destination $HOST_IP:\$APISERVER_PORT
done
iptables -w -t nat -A BALLAST-POSTROUTING -s $POD_CIDR ! -d $POD_CIDR -o eth0 -j MASQUERADE
EOF
chmod 755 "$r/usr/local/sbin/ballast-service-net"
printf 'APISERVER_PORT=0\n' >"$r/etc/default/ballast-guest" # the seed's copy replaces it
cat >"$r/etc/systemd/system/ballast-service-net.service" <<'EOF'
[Unit]
Description=the kubernetes Service address and pod masquerading (what kube-proxy and a real network give)
Requires=ballast-seed.service ballast-net.service
After=ballast-seed.service ballast-net.service
Before=kubelet.service containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/ballast-service-net

[Install]
WantedBy=multi-user.target
EOF
cat >"$r/etc/systemd/system/ballast-images.service" <<'EOF'
[Unit]
Description=import the node's local images into containerd
Requires=containerd.service
After=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/ballast-import-images

[Install]
WantedBy=multi-user.target
EOF
# a container whose PID 1 ignores SIGTERM (`sleep`) would hold a reboot up for systemd's default 90 s
install -d "$r/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultTimeoutStopSec=10s\n' >"$r/etc/systemd/system.conf.d/10-ballast-vm.conf"
printf 'NODE_NAME=unset\nKUBELET_V=1\n' >"$r/etc/default/kubelet" # the seed's copy replaces it
echo 'ballast-vm' >"$r/etc/hostname"
printf '127.0.0.1 localhost\n' >"$r/etc/hosts"
rm -f "$r/etc/resolv.conf" && echo '# no DNS in this test guest' >"$r/etc/resolv.conf"
echo '/dev/vda / ext4 defaults,noatime 0 0' >"$r/etc/fstab"
chroot "$r" systemctl enable ballast-seed.service ballast-net.service ballast-service-net.service ballast-images.service containerd.service \
  kubelet.service ssh.service >/dev/null 2>&1
# nothing that reaches the network or only slows the boot (units absent from the suite are skipped)
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service \
  fstrim.timer man-db.timer systemd-timesyncd.service systemd-resolved.service systemd-networkd-wait-online.service \
  systemd-networkd.service systemd-networkd.socket ssh.socket getty@tty1.service; do
  chroot "$r" systemctl mask "$u" >/dev/null 2>&1 || true
done

# --- versions, kernel, disk ---------------------------------------------------------------------------------
{
  echo "suite: $SUITE ($(. "$r/etc/os-release" && echo "$PRETTY_NAME"))"
  chroot "$r" dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' systemd containerd runc \
    containernetworking-plugins busybox-static openssh-server libc6 iptables "linux-image-*" 2>/dev/null |
    awk '$1 == "ii" {print $2, $3}'
  echo "kernel: $(basename "$(ls "$r"/boot/vmlinuz-* | tail -1)")"
  echo "kubelet: $("$kubelet" --version)"
} >"$IMG_DIR/versions.txt.new"
cp -L "$(ls "$r"/boot/vmlinuz-* | tail -1)" "$IMG_DIR/vmlinuz.new"
cp -L "$(ls "$r"/boot/initrd.img-* | tail -1)" "$IMG_DIR/initrd.img.new"
rm -f "$IMG_DIR/disk.img.new"
truncate -s "$DISK_SIZE" "$IMG_DIR/disk.img.new"
nice -n 10 mkfs.ext4 -q -F -L ballastvm -E lazy_itable_init=1,lazy_journal_init=1 -d "$r" "$IMG_DIR/disk.img.new"
rootfs_size=$(du -sh "$r" | cut -f1)
for f in disk.img vmlinuz initrd.img versions.txt; do mv "$IMG_DIR/$f.new" "$IMG_DIR/$f"; done
echo "$stamp" >"$IMG_DIR/stamp"
{
  echo "image $SUITE built in $(vm_since "$t0") s"
  echo "rootfs $rootfs_size; disk.img $(du -h --apparent-size "$IMG_DIR/disk.img" | cut -f1) apparent," \
    "$(du -h "$IMG_DIR/disk.img" | cut -f1) allocated; vmlinuz $(du -h "$IMG_DIR/vmlinuz" | cut -f1);" \
    "initrd $(du -h "$IMG_DIR/initrd.img" | cut -f1)"
  sed 's/^/  /' "$IMG_DIR/versions.txt"
} | tee "$IMG_DIR/build.txt"
