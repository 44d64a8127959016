//! `goset-dist install` (what `make install` runs after building) into a temporary prefix, from
//! the built tree: the installed goset-run finds the installed libgoset.so and places a task
//! with it, each man page renders with `man -l`, the installed bash completion completes
//! `goset-run --sm` to `--smt`, and `goset completions SHELL` prints what was installed. Then
//! `goset-dist uninstall` leaves no file behind. `goset-dist deb` (what `make deb` runs) builds
//! a Debian package of the same files under /usr: dpkg-deb reads its fields and files, and the
//! goset-run extracted from it (never installed) places a task with the extracted shim. Bad
//! input to any of them is one line and exit 2.

use shim_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn goset_dist_bin() -> PathBuf {
    goset_run_bin().with_file_name("goset-dist")
}

const PROGRAMS: [&str; 3] = ["goset", "goset-run", "goset-bench"];

/// Builds the Slurm plugin beside goset-dist, as `make` does where libslurm-dev's spank.h is
/// (goset-dist installs it, with its plugstack.conf.d snippet, when it is there); whether it
/// is there. Written under a name of its own, then renamed: both tests build it.
fn build_spank_plugin() -> bool {
    let plugin = goset_dist_bin().with_file_name("goset_spank.so");
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = plugin.with_extension(format!("so.{}.{n}", std::process::id()));
    if !shim_tests::tools::build_spank_plugin(&tmp) {
        return plugin.exists();
    }
    std::fs::rename(&tmp, &plugin).unwrap();
    true
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

/// Directories 755, programs 755, the rest 644, whatever the umask goset-dist ran under.
fn check_modes(prefix: &Path) {
    use std::os::unix::fs::MetadataExt;
    let mut todo = vec![prefix.to_path_buf()];
    while let Some(d) = todo.pop() {
        assert_eq!(
            std::fs::metadata(&d).unwrap().mode() & 0o7777,
            0o755,
            "{}",
            d.display()
        );
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            let want = if path.parent().unwrap().ends_with("bin") {
                0o755
            } else {
                0o644
            };
            assert_eq!(
                std::fs::metadata(&path).unwrap().mode() & 0o7777,
                want,
                "{}",
                path.display()
            );
        }
    }
}

/// Runs the installed goset-run on `args` (`-n 1 --sample 0` and the task after `--`).
fn installed_goset_run(prefix: &Path, extra: &[&str], task: &[&str]) -> Outcome {
    let mut cmd = clean_command(prefix.join("bin/goset-run"));
    // --share: a run of another test binary that booked the CPUs must not fail this one.
    cmd.args(["-n", "1", "--sample", "0", "-q", "--share"])
        .args(extra)
        .arg("--")
        .args(task);
    let _serial = launcher_lock();
    run(cmd)
}

/// The installed goset-run runs `true` placed by the shim, and that shim is the installed
/// `PREFIX/lib/libgoset.so` (what the task maps), not the build tree's.
fn check_placement(prefix: &Path) {
    let report = prefix.join("report.json");
    installed_goset_run(prefix, &["--json", report.to_str().unwrap()], &["true"]).expect_code(0);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["run"]["shim"], true, "{report}");
    let threads = report["threads"].as_array().unwrap();
    assert!(!threads.is_empty(), "{report}");
    for t in threads {
        assert_eq!(t["placed_by"], "shim", "{report}");
    }
    let maps = installed_goset_run(prefix, &[], &["cat", "/proc/self/maps"]);
    maps.expect_code(0);
    let mapped: Vec<&str> = (maps.stdout.lines())
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.ends_with("/libgoset.so"))
        .collect();
    let installed = prefix.join("lib/libgoset.so");
    assert!(!mapped.is_empty(), "no libgoset.so mapped\n{}", maps.dump());
    for path in mapped {
        assert_eq!(Path::new(path), installed, "{}", maps.dump());
    }
}

/// `man -l` renders each page (`share/man/man1/PROGRAM.1` and `suffix`: `.gz` in the package)
/// with its program's name and flags, and troff says nothing.
fn check_man_pages(prefix: &Path, suffix: &str) {
    if Command::new("man").arg("--version").output().is_err() {
        missing("man", "apt-get install -y man-db");
        return;
    }
    for (program, flag) in [
        ("goset", "completions"),
        ("goset-run", "--smt"),
        ("goset-bench", "--runs"),
    ] {
        let page = prefix.join(format!("share/man/man1/{program}.1{suffix}"));
        let mut cmd = Command::new("man");
        cmd.arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "80");
        let out = run(cmd);
        out.expect_code(0);
        // Justified: words apart by any number of spaces.
        let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains(&format!("NAME {program} - ")) && text.contains(flag),
            "{program}.1\n{}",
            out.dump()
        );
        assert!(!out.stderr.contains("troff"), "{program}.1\n{}", out.dump());
    }
}

/// Bash, with the installed completion of goset-run sourced, completes `goset-run --sm` to
/// `--smt`: the function `complete -p` names is called as bash would call it.
fn check_bash_completion(prefix: &Path) {
    let script = r#"
        source "$1" || exit 3
        spec=$(complete -p goset-run) || exit 4
        fn=${spec#*-F }
        fn=${fn%% *}
        COMP_WORDS=(goset-run --sm)
        COMP_CWORD=1
        COMP_LINE="goset-run --sm"
        COMP_POINT=${#COMP_LINE}
        "$fn" goset-run --sm goset-run
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "-c", script, "bash"])
        .arg(prefix.join("share/bash-completion/completions/goset-run"));
    let out = run(cmd);
    out.expect_code(0);
    assert_eq!(out.stdout, "--smt\n", "{}", out.dump());
}

/// The noise record's service runs the installed goset's watch, and its timer is installed
/// but not enabled (no `.wants` link: off by default); `systemd-analyze verify`, where
/// present, finds nothing to say of them.
fn check_noise_units(prefix: &Path) {
    let units = prefix.join("lib/systemd/system");
    let service = std::fs::read_to_string(units.join("goset-noise.service")).unwrap();
    let exec = format!("ExecStart={}/bin/goset noise --watch 60s", prefix.display());
    assert!(service.contains(&exec), "{service}");
    let timer = std::fs::read_to_string(units.join("goset-noise.timer")).unwrap();
    assert!(timer.contains("OnUnitActiveSec=10min") && timer.contains("WantedBy=timers.target"));
    assert!(
        !units.join("timers.target.wants").exists(),
        "installed disabled"
    );
    // --man=no: the pages are in the prefix, not where man looks.
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(units.join("goset-noise.timer"))
        .arg(units.join("goset-noise.service"))
        .output();
    if let Ok(out) = verify {
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !said.contains("goset-noise"),
            "systemd-analyze verify: {said}"
        );
    }
}

/// `goset completions SHELL` prints goset's and goset-run's installed scripts.
fn check_completions_command(prefix: &Path) {
    for (shell, path) in [
        ("bash", "share/bash-completion/completions/{}"),
        ("zsh", "share/zsh/site-functions/_{}"),
        ("fish", "share/fish/vendor_completions.d/{}.fish"),
    ] {
        let installed: String = ["goset", "goset-run"]
            .map(|p| std::fs::read_to_string(prefix.join(path.replace("{}", p))).unwrap())
            .concat();
        let mut cmd = clean_command(prefix.join("bin/goset"));
        cmd.args(["completions", shell]);
        let out = run(cmd);
        out.expect_code(0);
        // Both come from the same clap commands; they differ only when one program is older
        // than the other.
        assert!(
            out.stdout == installed,
            "goset completions {shell} is not what goset-dist installed: rebuild both \
             (cargo build --workspace)"
        );
    }
}

#[test]
fn installs_into_a_prefix_that_runs_renders_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    // Canonical: the paths the kernel shows in /proc/self/maps are.
    let prefix = dir.path().canonicalize().unwrap().join("prefix");
    let plugin = build_spank_plugin();
    let mut cmd = clean_command(goset_dist_bin());
    cmd.args(["install", "--prefix"]).arg(&prefix);
    // umask 000 must not make the prefix's directories writable by all (install(1) sets modes).
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::umask(0);
            Ok(())
        });
    }
    run(cmd).expect_code(0);
    check_modes(&prefix);
    let mut want: Vec<PathBuf> = vec![
        "lib/libgoset.so".into(),
        "lib/systemd/system/goset-noise.service".into(),
        "lib/systemd/system/goset-noise.timer".into(),
    ];
    if plugin {
        want.push("lib/goset/goset_spank.so".into());
        // Under PREFIX/etc for a prefix other than /usr.
        want.push("etc/slurm/plugstack.conf.d/goset.conf".into());
        let snippet = std::fs::read_to_string(prefix.join(want.last().unwrap())).unwrap();
        let listed = format!(
            "optional {}/lib/goset/goset_spank.so goset_run={}/bin/goset-run\n",
            prefix.display(),
            prefix.display()
        );
        assert!(snippet.ends_with(&listed), "{snippet}");
    }
    for p in PROGRAMS {
        want.extend(
            [
                format!("bin/{p}"),
                format!("share/man/man1/{p}.1"),
                format!("share/bash-completion/completions/{p}"),
                format!("share/zsh/site-functions/_{p}"),
                format!("share/fish/vendor_completions.d/{p}.fish"),
            ]
            .map(PathBuf::from),
        );
    }
    want.sort();
    assert_eq!(files_under(&prefix), want);

    check_noise_units(&prefix);
    check_placement(&prefix);
    check_man_pages(&prefix, "");
    check_bash_completion(&prefix);
    check_completions_command(&prefix);

    std::fs::remove_file(prefix.join("report.json")).unwrap();
    let mut cmd = clean_command(goset_dist_bin());
    cmd.args(["uninstall", "--prefix"]).arg(&prefix);
    run(cmd).expect_code(0);
    assert_eq!(files_under(&prefix), Vec::<PathBuf>::new());
}

/// How long a package build may take: stripping the debug binaries, dpkg-shlibdeps and
/// dpkg-deb take some 25 s of CPU, 1 min 51 s on two CPUs shared with other builds; the
/// watchdog's 60 s is no bound for that.
const DEB_LIMIT: Duration = Duration::from_secs(300);

/// Runs `goset-dist deb --out OUT [extra]` and returns the Depends it says it wrote.
fn build_deb(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = clean_command(goset_dist_bin());
    cmd.args(["deb", "--out"]).arg(out).args(extra);
    cmd.envs(env.iter().copied());
    let built = {
        let _alone = launcher_lock();
        Started::new(cmd).finish(DEB_LIMIT)
    };
    built.expect_code(0);
    let depends = (built.stdout.split_once("(Depends: "))
        .and_then(|(_, rest)| rest.trim_end().strip_suffix(')'))
        .unwrap_or_else(|| panic!("no Depends said\n{}", built.dump()));
    depends.to_string()
}

/// The output of `dpkg-deb ARGS`.
fn dpkg_deb(args: &[&std::ffi::OsStr]) -> String {
    let mut cmd = Command::new("dpkg-deb");
    cmd.args(args);
    let out = run(cmd);
    out.expect_code(0);
    out.stdout
}

/// The package's control fields, as `dpkg-deb --info` lists them.
fn check_fields(deb: &Path, version: &str, arch: &str, depends: &str) {
    let info = dpkg_deb(&["--info".as_ref(), deb.as_os_str()]);
    let field = |name: &str| -> String {
        (info.lines())
            .find_map(|l| l.strip_prefix(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no {name}\n{info}"))
            .to_string()
    };
    assert_eq!(field("Package"), "goset", "{info}");
    assert_eq!(field("Version"), version, "{info}");
    assert_eq!(field("Architecture"), arch, "{info}");
    assert!(field("Maintainer").ends_with('>'), "{info}");
    assert_eq!(field("Depends"), depends, "{info}");
    assert!(depends.starts_with("libc6 (>= 2."), "{info}");
    assert!(
        field("Installed-Size").parse::<u64>().unwrap() > 0,
        "{info}"
    );
    assert_eq!(field("Description"), "noise-aware CPU pinning", "{info}");
}

/// Every file in the package, owned by root with its mode, and no other; with the Slurm
/// plugin (`plugin`), its snippet a conffile.
fn check_contents(deb: &Path, plugin: bool) {
    // `-rwxr-xr-x root/root 8317008 2024-01-01 12:00 ./usr/bin/goset`
    let contents = dpkg_deb(&["--contents".as_ref(), deb.as_os_str()]);
    let mut files = Vec::new();
    for line in contents.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[1], "root/root", "{contents}");
        let path = fields[5].trim_start_matches("./");
        if fields[0].starts_with('-') {
            let program = path.starts_with("usr/bin/");
            let mode = if program { "-rwxr-xr-x" } else { "-rw-r--r--" };
            assert_eq!(fields[0], mode, "{path}\n{contents}");
            files.push(PathBuf::from(path));
        } else {
            assert_eq!(fields[0], "drwxr-xr-x", "{path}\n{contents}");
        }
    }
    files.sort();
    let mut want: Vec<PathBuf> = vec![
        "usr/lib/libgoset.so".into(),
        "usr/lib/systemd/system/goset-noise.service".into(),
        "usr/lib/systemd/system/goset-noise.timer".into(),
        "usr/share/doc/goset/copyright".into(),
    ];
    if plugin {
        want.push("usr/lib/goset/goset_spank.so".into());
        want.push("etc/slurm/plugstack.conf.d/goset.conf".into());
        let conffiles = dpkg_deb(&["-I".as_ref(), deb.as_os_str(), "conffiles".as_ref()]);
        assert_eq!(conffiles, "/etc/slurm/plugstack.conf.d/goset.conf\n");
    }
    for p in PROGRAMS {
        want.extend(
            [
                format!("usr/bin/{p}"),
                format!("usr/share/man/man1/{p}.1.gz"),
                format!("usr/share/bash-completion/completions/{p}"),
                format!("usr/share/zsh/site-functions/_{p}"),
                format!("usr/share/fish/vendor_completions.d/{p}.fish"),
            ]
            .map(PathBuf::from),
        );
    }
    want.sort();
    assert_eq!(files, want, "{contents}");
}

#[test]
fn builds_a_debian_package_whose_extracted_files_run() {
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        missing("dpkg-deb", "apt-get install -y dpkg");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Canonical: the paths the kernel shows in /proc/self/maps are.
    let dir_path = dir.path().canonicalize().unwrap();
    let out = dir_path.join("out");
    let plugin = build_spank_plugin();
    let depends = build_deb(&out, &[], &[]);
    let arch = Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .unwrap();
    let arch = String::from_utf8(arch.stdout).unwrap().trim().to_string();
    let version = env!("CARGO_PKG_VERSION").replace('-', "~");
    let name = format!("goset_{version}_{arch}.deb");
    // The package alone: the staging tree is gone.
    assert_eq!(files_under(&out), vec![PathBuf::from(&name)]);
    let deb = out.join(&name);

    check_fields(&deb, &version, &arch, &depends);
    check_contents(&deb, plugin);

    // Without dpkg-shlibdeps, Depends comes from the programs' ELF files: the same answer.
    // Uncompressed (dpkg >= 1.21.10 reads the variable): only Depends is looked at.
    if Command::new("dpkg-shlibdeps")
        .arg("--version")
        .output()
        .is_ok()
    {
        let fallback = build_deb(
            &dir_path.join("out-elf"),
            &["--no-shlibdeps"],
            &[("DPKG_DEB_COMPRESSOR_TYPE", "none")],
        );
        assert_eq!(fallback, depends, "--no-shlibdeps vs dpkg-shlibdeps");
    } else {
        skip_note("dpkg-shlibdeps is missing: Depends came from the ELF files alone");
    }

    // Extracted, not installed: usr/bin/goset-run finds usr/lib/libgoset.so.
    let root = dir_path.join("root");
    dpkg_deb(&["-x".as_ref(), deb.as_os_str(), root.as_os_str()]);
    check_placement(&root.join("usr"));
    check_man_pages(&root.join("usr"), ".gz");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let goset = goset_run_bin().with_file_name("goset");
    let missing_build = format!(
        "goset-dist: {}: No such file",
        empty.join("goset").display()
    );
    let deb_out = dir.path().join("deb");
    let cases: [(PathBuf, Vec<&std::ffi::OsStr>, &str); 5] = [
        (
            goset.clone(),
            vec!["completions".as_ref(), "tcsh".as_ref()],
            "goset: invalid value 'tcsh' for '<SHELL>' [possible values: bash, zsh, fish]",
        ),
        (
            goset,
            vec!["completions".as_ref()],
            "goset: the following required arguments were not provided: <SHELL>",
        ),
        (
            goset_dist_bin(),
            vec!["install".as_ref(), "--prefix".as_ref(), "relative".as_ref()],
            "goset-dist: --prefix relative: must be an absolute path",
        ),
        (
            goset_dist_bin(),
            vec![
                "install".as_ref(),
                "--prefix".as_ref(),
                prefix.as_os_str(),
                "--from".as_ref(),
                empty.as_os_str(),
            ],
            &missing_build,
        ),
        (
            goset_dist_bin(),
            vec![
                "deb".as_ref(),
                "--out".as_ref(),
                deb_out.as_os_str(),
                "--maintainer".as_ref(),
                "nobody".as_ref(),
            ],
            "goset-dist: --maintainer \"nobody\": must be 'Full Name <email@address>'",
        ),
    ];
    for (program, args, says) in cases {
        let mut cmd = clean_command(&program);
        cmd.args(&args);
        let out = run(cmd);
        out.expect_code(2);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}\n{}", out.dump());
        assert!(out.stderr.starts_with(says), "{args:?}\n{}", out.dump());
    }
    // A tree not built installs nothing; a bad Maintainer builds nothing.
    assert!(!prefix.exists());
    assert!(!deb_out.exists());
}
