//! The guest's initramfs: busybox, goset, the shim and the test programs with the libraries
//! they load, and the `/init` that [`crate::script`] writes.

use crate::Shape;
use shim_tests::{goset_run_bin, shim};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies `file` to the same path under `root`, creating directories.
fn put(root: &Path, file: &Path, at: &str) {
    let dest = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
}

/// The shared libraries `ldd` names for `exe`, the loader included.
fn libraries(exe: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(exe).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split_whitespace().find(|w| w.starts_with('/'))?;
            Some(PathBuf::from(path))
        })
        .collect()
}

/// Builds the initramfs for `shape` in `dir`, with the test `programs` at their guest paths.
pub(crate) fn initramfs(
    dir: &Path,
    shape: &Shape,
    programs: &[(&Path, &str)],
    llvm: bool,
) -> PathBuf {
    let root = dir.join("root");
    put(&root, Path::new("/bin/busybox"), "/bin/busybox");
    let ours = [
        (goset_run_bin(), "/opt/goset/goset-run"),
        (goset_run_bin().with_file_name("goset"), "/opt/goset/goset"),
        (shim(), "/opt/goset/libgoset.so"),
    ];
    let ours = ours.iter().map(|(path, at)| (path.as_path(), *at));
    for (built_path, at) in ours.chain(programs.iter().copied()) {
        put(&root, built_path, at);
        let dest = root.join(at.trim_start_matches('/'));
        // Debug builds carry ~15 MB of debug info each: the guest needs none of it.
        let _ = Command::new("strip").arg(&dest).status();
        for lib in libraries(built_path) {
            put(&root, &lib, lib.to_str().unwrap());
        }
    }
    let init = root.join("init");
    std::fs::write(&init, crate::script::init_script(shape, llvm)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = dir.join("initrd.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > \"$2\"")
        .arg("sh")
        .arg(&root)
        .arg(&image)
        .status()
        .unwrap();
    assert!(status.success(), "cpio of the initramfs");
    image
}
