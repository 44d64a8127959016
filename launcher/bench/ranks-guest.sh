#!/bin/sh
# GPU ranks near their device's node against far from it, inside a QEMU guest with 2 packages x
# 2 cores x 2 SMT threads and 2 NUMA nodes (CPUs 0-3 and 4-7), the VM tests' first shape, with a
# display device behind a PCI expander bridge on each node standing in for a GPU (gpu0 on node
# 0, gpu1 on node 1). Not a test: it prints figures.
#   launcher/bench/ranks-guest.sh [ROUNDS] [MIB]
# (defaults 3, 64). Two ranks of 4 threads run the triad (shim-tests/programs/triad.c) with their
# arrays bound to their GPU's node, as the pinned buffers a GPU reads are:
# - near: goset-run -n 8 --per-process 4 --near gpu:local-rank, rank r on GPU r's node;
# - far:  the same, with each rank's memory on the other GPU's node (its threads stay near the
#         GPU its LOCAL_RANK names: the placement a rank gets when its block ignores its GPU);
# - none: the same two processes without goset, OMP_NUM_THREADS=4, the kernel placing them.
# Each round runs the three in a rotating order; ratios are against near in the same round.
# Software emulation (TCG), as the VM tests boot: the guest's two nodes are backed by the host's
# one memory node, so near and far cannot differ by what a node's memory is worth here.
# PROFILE=debug uses the debug build (the placement code only; the triad is built -O2 here).
# Needs qemu-system-x86, busybox-static, cpio and the kernel shim-tests/vm/fetch-kernel.sh
# fetches into target/vm/ (or GOSET_VM_KERNEL).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
rounds=${1:-3}
mib=${2:-64}
profile=${PROFILE:-release}
kernel=${GOSET_VM_KERNEL:-$top/target/vm/vmlinux}
for need in qemu-system-x86_64 cpio cc; do
    command -v "$need" >/dev/null || { echo "ranks-guest: $need is missing (see the header)" >&2; exit 2; }
done
[ -x /bin/busybox ] || { echo "ranks-guest: /bin/busybox is missing (apt-get install -y busybox-static)" >&2; exit 2; }
[ -r "$kernel" ] || { echo "ranks-guest: no kernel at $kernel (run shim-tests/vm/fetch-kernel.sh)" >&2; exit 2; }
case $profile in
release) (cd "$top" && cargo build --release -q -p goset -p goset-preload) ;;
debug) (cd "$top" && cargo build -q -p goset -p goset-preload) ;;
*) echo "ranks-guest: PROFILE=$profile: expected release or debug" >&2; exit 2 ;;
esac
bin=${CARGO_TARGET_DIR:-$top/target}/$profile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/bin" "$root/opt/goset" "$root/opt/t"
cc -O2 -fopenmp -o "$root/opt/t/triad" "$top/shim-tests/programs/triad.c"
cp /bin/busybox "$root/bin/busybox"
for f in goset-run goset libgoset.so; do cp "$bin/$f" "$root/opt/goset/$f"; strip "$root/opt/goset/$f" 2>/dev/null || true; done
for exe in "$root/opt/t/triad" "$root/opt/goset/goset-run" "$root/opt/goset/libgoset.so"; do
    ldd "$exe" | awk '/=> \// { print $3 } /^\t\// { print $1 }'
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cat >"$root/opt/t/ranks.sh" <<'EOF'
# In the guest: ROUNDS MIB. Prints one line a round: the summed MB/s of each mode.
rounds=$1 mib=$2
t=/opt/t/triad
run="/opt/goset/goset-run -q --sample 0 -n 8 --per-process 4 --near gpu:local-rank --"
sum() { awk '/^triad/ { s += $2 } END { printf "%d", s }'; }
near() { $run sh -c "LOCAL_RANK=0 $t $mib 5 0 & LOCAL_RANK=1 $t $mib 5 1 & wait" | sum; }
far() { $run sh -c "LOCAL_RANK=1 $t $mib 5 0 & LOCAL_RANK=0 $t $mib 5 1 & wait" | sum; }
none() { OMP_NUM_THREADS=4 sh -c "$t $mib 5 0 & $t $mib 5 1 & wait" | sum; }
/opt/goset/goset-run --sample 0 -n 8 --per-process 4 --near gpu:local-rank --dry-run 2>&1 | sed -n '/^Ranks/,$p'
printf '%-6s %10s %10s %6s %10s %6s\n' round near far ratio none ratio
r=1
while [ "$r" -le "$rounds" ]; do
    case $((r % 3)) in
    1) n=$(near); f=$(far); o=$(none) ;;
    2) f=$(far); o=$(none); n=$(near) ;;
    0) o=$(none); n=$(near); f=$(far) ;;
    esac
    awk -v r="$r" -v n="$n" -v f="$f" -v o="$o" \
        'BEGIN { printf "%-6s %10d %10d %6.2f %10d %6.2f\n", r, n, f, f / n, o, o / n }'
    r=$((r + 1))
done
EOF
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
mkdir /dev/shm; mount -t tmpfs shm /dev/shm
echo '== BEGIN'
sh /opt/t/ranks.sh $rounds $mib 2>&1
echo '== END'
poweroff -f
EOF
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")
# Each node holds one rank's arrays (3 x MIB, twice over in `far`'s swap) and half the initramfs.
node_mib=$(( 6 * mib + 256 ))
echo "ranks-guest: 2 nodes of $node_mib MiB, software emulation, $profile build" >&2
timeout -k 10 1800 qemu-system-x86_64 -accel tcg,thread=multi -cpu max,vendor=GenuineIntel -smp 8,sockets=2,cores=2,threads=2 \
    -m $((2 * node_mib)) \
    -object "memory-backend-ram,id=m0,size=${node_mib}M" -numa node,nodeid=0,cpus=0-3,memdev=m0 \
    -object "memory-backend-ram,id=m1,size=${node_mib}M" -numa node,nodeid=1,cpus=4-7,memdev=m1 \
    -vga none \
    -device pxb,id=pxb0,bus_nr=32,numa_node=0,bus=pci.0 -device bochs-display,bus=pxb0,addr=0 \
    -device pxb,id=pxb1,bus_nr=64,numa_node=1,bus=pci.0 -device bochs-display,bus=pxb1,addr=0 \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 mitigations=off panic=-1 quiet" \
    -nographic -no-reboot -display none </dev/null 2>&1 |
    tr -d '\r' >"$work/console"
sed -n '/== BEGIN$/,/^== END/p' "$work/console" | sed '1d;$d'
grep -q '^== END' "$work/console" || { echo "ranks-guest: the guest did not finish; it printed:" >&2; tail -20 "$work/console" >&2; exit 1; }
