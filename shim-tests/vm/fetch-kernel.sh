#!/bin/sh
# Fetches the kernel the VM tests boot (shim-tests/tests/vm/): Debian's linux-image package
# that linux-image-amd64 depends on, downloaded and unpacked (never installed), and the
# uncompressed vmlinux cut out of its vmlinuz (the XZ stream after the boot stub), which QEMU
# boots directly (PVH entry).
#   shim-tests/vm/fetch-kernel.sh [DIR]      (default: target/vm of the workspace)
# Needs apt-get, dpkg and python3; does nothing when DIR/vmlinux exists.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../../target/vm}
[ -s "$dir/vmlinux" ] && exit 0
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$pkg" ] || { echo "fetch-kernel: no linux-image package found (run apt-get update)" >&2; exit 1; }
(cd "$work" && apt-get download -qq "$pkg" 2>/dev/null && dpkg -x ./*.deb unpacked)
python3 - "$work"/unpacked/boot/vmlinuz-* "$dir/vmlinux.part" <<'PY'
import lzma, sys
image = open(sys.argv[1], "rb").read()
start = image.find(b"\xfd7zXZ\x00")
if start < 0:
    sys.exit("fetch-kernel: no XZ stream in " + sys.argv[1])
open(sys.argv[2], "wb").write(lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(image[start:]))
PY
mv "$dir/vmlinux.part" "$dir/vmlinux"
echo "fetch-kernel: $pkg -> $dir/vmlinux"
