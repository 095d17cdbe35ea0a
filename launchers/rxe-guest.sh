#!/usr/bin/env bash
# Run a command in a QEMU guest that has a Soft-RoCE (rdma_rxe) device, rxe0: verbs without RDMA
# hardware, on a laptop or in CI. As root, on Debian/Ubuntu:
#   bash launchers/rxe-guest.sh COMMAND [ARGS...]
#   bash launchers/rxe-guest.sh .venv/bin/commbench p2p-latency -t verbs -m 8:64K
#   bash launchers/rxe-guest.sh .venv/bin/python -m pytest -m rdma
# Prints the command's output (stdout and stderr together, from the guest's console) and exits with
# its status. The guest boots Debian's own kernel (rdma_rxe is a module there) under QEMU's software
# CPU (TCG: no KVM needed; 10-50x slower than native, so compare verbs numbers only with perftest run
# in the same guest). Its root is this host's own / (read-only over 9p, a tmpfs overlay on top), so it
# sees this venv, pyverbs and perftest; the current directory is shared read-write, so results files
# come back. In the guest: a dummy netdev rxe-net0 (10.77.0.1/24) carries rxe0; GID index 1 is its
# RoCE v2 IPv4 GID; both ranks of a run share it.
# Installs what it needs with apt-get (qemu-system-x86, busybox-static, kmod, perftest, rdma-core,
# ibverbs-providers, python3-pyverbs) and keeps the kernel and initramfs in
# ${XDG_CACHE_HOME:-~/.cache}/commbench/rxe-guest. RXE_GUEST_MEM (default 3G), RXE_GUEST_CPUS (2),
# RXE_GUEST_TIMEOUT (seconds, default 3600), RXE_GUEST_APPEND (more kernel arguments, e.g.
# "clocksource=tsc tsc=reliable": the guest otherwise reads its clock from the emulated HPET).
set -euo pipefail
die() { echo "rxe-guest: $*" >&2; exit 2; }

# In the guest, this script is also init's second stage (PID 1 on the overlay root).
if [ "${1:-}" = --stage2 ]; then
  set +eu
  mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
  mount -t tmpfs cgroup /sys/fs/cgroup  # cgroup v1 hierarchies, as on the host: slurmd (srun in the guest) needs them
  for c in cpuset cpu cpuacct memory devices freezer pids; do
    mkdir -p "/sys/fs/cgroup/$c" && mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
  done
  mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
  mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
  mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
  exec > /dev/ttyS0 2>&1 < /dev/null
  stty -F /dev/ttyS0 -onlcr 2>/dev/null
  RUN=$(sed -n 's/.*rxe_run=\([^ ]*\).*/\1/p' /proc/cmdline)
  mkdir -p "$RUN" && mount -t 9p -o trans=virtio,version=9p2000.L run "$RUN"
  read -r KVER MODS CWD < "$RUN/env"
  mkdir -p "$CWD" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 cwd "$CWD"
  mkdir -p "/lib/modules/$KVER" && mount --bind "$MODS" "/lib/modules/$KVER"
  hostname "$(cat /etc/hostname 2>/dev/null || echo rxe-guest)"
  ip link set lo up
  ip link add rxe-net0 type dummy && ip addr add 10.77.0.1/24 dev rxe-net0 && ip link set rxe-net0 up
  { modprobe rdma_rxe && modprobe ib_uverbs && rdma link add rxe0 type rxe netdev rxe-net0; } \
    || echo "rxe-guest: could not bring up rxe0 (modprobe rdma_rxe, rdma link add)"
  echo "@@rxe-guest: begin@@"
  bash "$RUN/cmd.sh"
  echo $? > "$RUN/status"
  echo "@@rxe-guest: end@@"
  sync
  /bin/busybox poweroff -f
fi
[ $# -gt 0 ] || die "usage: bash launchers/rxe-guest.sh COMMAND [ARGS...] (as root)"
[ "$(id -u)" = 0 ] || die "needs root (apt-get, and exporting / to the guest); run it with sudo"
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs a Debian or Ubuntu host (apt-get, dpkg-deb)"
CACHE=${RXE_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/commbench/rxe-guest}
MEM=${RXE_GUEST_MEM:-3G}
CPUS=${RXE_GUEST_CPUS:-2}
TIMEOUT=${RXE_GUEST_TIMEOUT:-3600}
mkdir -p "$CACHE"

# 1. host packages
need=()
for pair in qemu-system-x86_64:qemu-system-x86 depmod:kmod ib_send_lat:perftest rdma:iproute2 cpio:cpio; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
for pkg in busybox-static rdma-core ibverbs-providers python3-pyverbs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "rxe-guest: installing ${need[*]}" >&2
  apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || die "apt-get install ${need[*]} failed"
fi
[ -x /bin/busybox ] || die "busybox-static did not install /bin/busybox"

# 2. Debian's kernel (what linux-image-amd64 depends on), unpacked once, with its module index
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || die "no Debian kernel package found (apt-cache depends linux-image-amd64); run apt-get update"
KVER=${pkg#linux-image-}
KDIR=$CACHE/$pkg
if [ ! -f "$KDIR/.unpacked" ]; then
  echo "rxe-guest: fetching $pkg" >&2
  rm -rf "$KDIR" "$CACHE"/linux-image-*.deb
  (cd "$CACHE" && apt-get download -q "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed (network?)"
  dpkg-deb -x "$CACHE"/"$pkg"_*.deb "$KDIR"
  rm -f "$CACHE"/"$pkg"_*.deb
  MODS=$KDIR/lib/modules/$KVER
  [ -d "$MODS" ] || MODS=$KDIR/usr/lib/modules/$KVER
  [ -d "$MODS" ] || die "$pkg has no modules tree"
  depmod -b "${MODS%/lib/modules/$KVER}" "$KVER"
  touch "$KDIR/.unpacked"
fi
VMLINUZ=$KDIR/boot/vmlinuz-$KVER
MODS=$KDIR/lib/modules/$KVER
[ -d "$MODS" ] || MODS=$KDIR/usr/lib/modules/$KVER
[ -f "$VMLINUZ" ] || die "$pkg has no $VMLINUZ"

# 3. the initramfs: busybox, the modules for virtio, 9p and overlayfs, and an init that mounts the
#    host's / read-only with a tmpfs overlay and switches to stage 2 (this script, run as the guest's init)
HERE=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
INITRD=$CACHE/initrd-$KVER.cpio.gz
if [ ! -f "$INITRD" ] || [ "$HERE" -nt "$INITRD" ]; then
  work=$(mktemp -d)
  mkdir -p "$work"/{bin,proc,sys,dev,lower,upper,newroot,mods}
  cp /bin/busybox "$work/bin/busybox"
  : > "$work/mods/order"
  for m in virtio_pci virtio_blk 9pnet_virtio 9p overlay; do
    modprobe -d "${MODS%/lib/modules/$KVER}" -S "$KVER" --show-depends "$m" 2>/dev/null | while read -r kind path _; do
      [ "$kind" = insmod ] || continue
      base=$(basename "$path")
      grep -qx "$base" "$work/mods/order" || { cp "$path" "$work/mods/"; echo "$base" >> "$work/mods/order"; }
    done
  done
  cat > "$work/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do
  case $m in *.xz) xz -dc "/mods/$m" > /tmp.ko && insmod /tmp.ko; rm -f /tmp.ko;; *.zst) zstd -dc "/mods/$m" > /tmp.ko && insmod /tmp.ko; rm -f /tmp.ko;; *) insmod "/mods/$m";; esac 2>/dev/null
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower || { echo "rxe-guest init: cannot mount the host's root over 9p"; poweroff -f; }
mount -t tmpfs -o size=75% tmpfs /upper && mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot
stage2=$(sed -n 's/.*rxe_stage2=\([^ ]*\).*/\1/p' /proc/cmdline)
umount /proc /sys /dev 2>/dev/null
exec switch_root /newroot /bin/bash "$stage2" --stage2
EOF
  chmod +x "$work/init"
  (cd "$work" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  rm -rf "$work"
fi

# 4. this run: the command, the current directory (shared read-write), a place for the exit status
RUN=$(mktemp -d "${TMPDIR:-/tmp}/rxe-guest.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
{
  printf 'cd %q\n' "$PWD"
  printf 'export PATH=%q HOME=%q LANG=C.UTF-8 TERM=dumb\n' "$PATH" "$HOME"
  printf '%q ' "$@"
  echo
} > "$RUN/cmd.sh"
echo "$KVER $MODS $PWD" > "$RUN/env"
timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp "$CPUS" -m "$MEM" \
  -nographic -no-reboot -monitor none -serial stdio -nic none \
  -kernel "$VMLINUZ" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=1 panic=-1 rxe_stage2=$HERE rxe_run=$RUN ${RXE_GUEST_APPEND:-}" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$RUN,mount_tag=run,security_model=none,multidevs=remap" \
  -virtfs "local,path=$PWD,mount_tag=cwd,security_model=passthrough,multidevs=remap" \
  </dev/null | sed -u -n -e 's/\r$//' -e '/@@rxe-guest: begin@@$/,/^@@rxe-guest: end@@$/{/@@rxe-guest: /d;p}' || true
[ -f "$RUN/status" ] || die "the guest ended without reporting a status (boot failure, or RXE_GUEST_TIMEOUT=$TIMEOUT s passed)"
exit "$(cat "$RUN/status")"
