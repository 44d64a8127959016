#!/bin/sh
# launcher/bench/hybrid.sh inside a QEMU guest with 2 packages x 2 cores x 2 SMT threads and
# 2 NUMA nodes (CPUs 0-3 and 4-7), the topology the VM tests use (not a test: it prints figures).
#   launcher/bench/hybrid-guest.sh [ROUNDS] [PROCS] [THREADS] [MIB]
# (defaults 3, 2, 4, 64). The guest has no mpirun: the processes are started by a shell, and
# Open MPI's binding is replaced by `taskset -c` to each process's share of a node (hybrid.sh's
# `bound`). Software emulation (TCG), as the VM tests boot: with the guest's nodes backed by
# the host's memory, the figures show what each placement costs, not what a real node's memory
# is worth.
# Needs qemu-system-x86, busybox-static, cpio and the kernel shim-tests/vm/fetch-kernel.sh
# fetches into target/vm/ (or GOSET_VM_KERNEL).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
rounds=${1:-3}
procs=${2:-2}
threads=${3:-4}
mib=${4:-64}
kernel=${GOSET_VM_KERNEL:-$top/target/vm/vmlinux}
for need in qemu-system-x86_64 cpio; do
    command -v "$need" >/dev/null || { echo "hybrid-guest: $need is missing (see the header)" >&2; exit 2; }
done
[ -x /bin/busybox ] || { echo "hybrid-guest: /bin/busybox is missing (apt-get install -y busybox-static)" >&2; exit 2; }
[ -r "$kernel" ] || { echo "hybrid-guest: no kernel at $kernel (run shim-tests/vm/fetch-kernel.sh)" >&2; exit 2; }
(cd "$top" && cargo build --release -q --workspace)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/bin" "$root/opt/goset" "$root/opt/t"
cc -O2 -fopenmp -o "$root/opt/t/triad" "$top/shim-tests/programs/triad.c"
cp /bin/busybox "$root/bin/busybox"
for f in goset-run goset libgoset.so; do cp "$top/target/release/$f" "$root/opt/goset/$f"; done
cp "$here/hybrid.sh" "$root/opt/t/hybrid.sh"
# The shared libraries of the dynamic programs, at their own paths.
for exe in "$root/opt/t/triad" "$root/opt/goset/goset-run" "$root/opt/goset/libgoset.so"; do
    ldd "$exe" | awk '/=> \// { print $3 } /^\t\// { print $1 }'
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
mkdir /dev/shm; mount -t tmpfs shm /dev/shm
echo '== BEGIN'
GOSET_BIN=/opt/goset TRIAD=/opt/t/triad HYBRID_LAUNCH=sh sh /opt/t/hybrid.sh $rounds $procs $threads $mib 2>&1
echo '== END'
poweroff -f
EOF
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")
# Each node's memory holds its processes' arrays (3 x MIB each) and half the initramfs.
node_mib=$(( procs * 3 * mib + 256 ))
echo "hybrid-guest: 2 nodes of $node_mib MiB, software emulation" >&2
timeout -k 10 1200 qemu-system-x86_64 -accel tcg,thread=multi -cpu max,vendor=GenuineIntel -smp 8,sockets=2,cores=2,threads=2 \
    -m $((2 * node_mib)) \
    -object "memory-backend-ram,id=m0,size=${node_mib}M" -numa node,nodeid=0,cpus=0-3,memdev=m0 \
    -object "memory-backend-ram,id=m1,size=${node_mib}M" -numa node,nodeid=1,cpus=4-7,memdev=m1 \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 mitigations=off panic=-1 quiet" \
    -nographic -no-reboot -display none </dev/null 2>&1 |
    tr -d '\r' >"$work/console"
sed -n '/== BEGIN$/,/^== END/p' "$work/console" | sed '1d;$d'
grep -q '^== END' "$work/console" || { echo "hybrid-guest: the guest did not finish; it printed:" >&2; tail -20 "$work/console" >&2; exit 1; }
