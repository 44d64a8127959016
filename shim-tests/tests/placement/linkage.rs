//! How goset-run reads and prepares the task: the ELF linkage of real programs built here
//! (glibc, static, musl, a script), the note it prints for a program the shim cannot reach,
//! and the shim's `LD_PRELOAD` entry in the run directory, removed with it.

use goset::elf::{self, Linkage};
use shim_tests::launch::run;
use shim_tests::{goset_run_bin, launcher_lock, shim, Build};
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn linkage_of_real_programs() {
    let build = Build::new();
    if let Some(dynamic) = build.c("ctxsw.c", "ctxsw") {
        match elf::read_file(&dynamic) {
            Linkage::Dynamic(interp) => assert!(elf::is_glibc_loader(&interp), "{interp:?}"),
            other => panic!("gcc's program: {other:?}"),
        }
        assert_eq!(elf::read_file(&dynamic).why_no_shim(), None);
    }
    if let Some(fixed) = build.c_static("ctxsw.c", "ctxsw-static") {
        assert_eq!(elf::read_file(&fixed), Linkage::Static);
    }
    if let Some(pie) = build.c_with(&["-static-pie"], "ctxsw.c", "ctxsw-static-pie") {
        assert_eq!(elf::read_file(&pie), Linkage::Static);
    }
    if let Some(musl) = build.musl("ctxsw.c", "ctxsw-musl") {
        match elf::read_file(&musl) {
            Linkage::Dynamic(interp) => {
                assert!(!elf::is_glibc_loader(&interp), "{interp:?}");
                assert!(interp.to_string_lossy().contains("musl"), "{interp:?}");
            }
            other => panic!("musl-gcc's program: {other:?}"),
        }
    }
    let script = build.dir().join("script");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    assert_eq!(elf::read_file(&script), Linkage::NotElf);
    // The head of an ELF file alone: the program headers it points to are missing.
    let sh = std::fs::read("/bin/sh").unwrap();
    let cut = build.dir().join("cut");
    std::fs::write(&cut, &sh[..64]).unwrap();
    assert_eq!(elf::read_file(&cut), Linkage::NotElf);
}

/// The note goset-run prints for the program it starts, if any.
fn note_for(argv: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(goset_run_bin())
        .args(["--sample", "0", "-n", "1", "--"])
        .args(argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("the housekeeper places its threads"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_program_the_shim_cannot_reach_is_named_once() {
    let build = Build::new();
    let _serial = launcher_lock();
    // A glibc program, and a script, say nothing.
    assert_eq!(note_for(&["true".as_ref()]), "");
    let script = build.dir().join("script");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(note_for(&[script.as_os_str()]), "");
    if let Some(fixed) = build.c_static("ctxsw.c", "ctxsw-static") {
        let note = note_for(&[fixed.as_os_str(), "0".as_ref()]);
        assert_eq!(
            note,
            format!(
                "goset-run: {}: statically linked: libgoset.so cannot reach it, so the housekeeper places its threads",
                fixed.display()
            )
        );
    }
    if let Some(musl) = build.musl("ctxsw.c", "ctxsw-musl") {
        let note = note_for(&[musl.as_os_str(), "0".as_ref()]);
        assert!(
            note.starts_with(&format!("goset-run: {}: loaded by /", musl.display()))
                && note.contains("musl")
                && note.lines().count() == 1,
            "{note}"
        );
    }
}

#[test]
fn the_shim_is_preloaded_after_the_users_entries_from_the_run_directory() {
    let _serial = launcher_lock();
    let mut cmd = Command::new(goset_run_bin());
    cmd.env("LD_PRELOAD", "/nonexistent/user.so")
        .args(["-q", "--sample", "0", "-n", "1", "--", "sh", "-c"])
        .arg(r#"echo "$LD_PRELOAD"; echo "$GOSET_PLAN"; readlink "$GOSET_PLAN"/lib/*/libgoset.so"#);
    let out = run(cmd);
    let text = out.stdout;
    assert_eq!(out.status.code(), Some(0), "{text}{}", out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    let plan = PathBuf::from(lines[1]);
    assert_eq!(
        lines[0],
        format!(
            "/nonexistent/user.so:{}/lib/$PLATFORM/libgoset.so",
            plan.display()
        )
    );
    // Every platform link names the built shim.
    let shim = std::fs::canonicalize(shim());
    assert!(lines.len() > 2, "no platform links: {text}");
    for link in &lines[2..] {
        assert_eq!(Path::new(link), shim.as_deref().unwrap(), "{text}");
    }
    assert!(!plan.exists(), "{} outlived the run", plan.display());
}

/// Every program under the shim loads what `libgoset.so` needs: glibc alone, no `libgcc_s`
/// (its unwinder is linked in, private), so that a C program's exec maps one library more, not
/// two (docs/shim.md, "What an exec costs").
#[test]
fn the_shim_needs_nothing_beyond_glibc() {
    let out = Command::new("readelf")
        .args(["-d", "-W"])
        .arg(shim())
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf -d {}", shim().display());
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = (text.lines())
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']')))
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{needed:?}");
    for lib in &needed {
        assert!(
            *lib == "libc.so.6" || lib.starts_with("ld-linux"),
            "libgoset.so needs {lib}: {needed:?}"
        );
    }
}
