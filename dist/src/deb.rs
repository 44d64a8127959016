//! `goset-dist deb --out DIR`: a Debian package of the built goset, made the way a maintainer
//! would by hand (`make deb` runs it, see docs/install.md): the install staged under PREFIX
//! `/usr`, the programs and the shim stripped, `DEBIAN/control` written, and
//! `dpkg-deb --root-owner-group --build` makes `DIR/goset_VERSION_ARCH.deb`.
//!
//! `Depends` is what `dpkg-shlibdeps` (dpkg-dev) computes from the staged programs; without it,
//! the same from the programs' own ELF files: each library they need mapped to its package, at
//! the newest symbol version they need of it (`GLIBC_2.34` -> `libc6 (>= 2.34)`).

use crate::{install, Content, Place};
use goset::error::Error;
use goset_plan::rootfile::os;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of `goset-dist deb`.
pub struct Deb {
    pub from: Option<PathBuf>,
    pub out: PathBuf,
    pub maintainer: String,
    pub no_shlibdeps: bool,
}

const DESCRIPTION: &str = "noise-aware CPU pinning
 goset-run measures how noisy each CPU is (interrupts, other tasks' load,
 hypervisor steal), picks the quietest CPUs with the topology in mind (SMT
 siblings, packages, NUMA nodes), and runs the task with libgoset.so
 preloaded, which puts every thread the task creates on its own planned CPU,
 even when an OpenMP or MPI runtime tries to place it elsewhere. goset alone
 reports the machine; goset-bench measures whether pinning pays off.";

/// Debian policy's /usr/share/doc/PACKAGE/copyright, in its machine-readable format.
const COPYRIGHT: &str = concat!(
    "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n",
    "Upstream-Name: goset\n\nFiles: *\nCopyright: the goset authors\nLicense: ",
    env!("CARGO_PKG_LICENSE"),
    "\n On Debian systems, the full text of the license is in\n",
    " /usr/share/common-licenses/",
    env!("CARGO_PKG_LICENSE"),
    ".\n"
);

/// The staging directory, removed however the build ends: a private directory of an
/// unguessable name in the temporary directory, which nobody else can rename or replace, since
/// strip, gzip and dpkg work in it by its path.
struct Stage(PathBuf);

impl Stage {
    fn make() -> Result<Stage, Error> {
        let tmp = std::env::temp_dir();
        let fail = |e: &dyn std::fmt::Display| {
            Error::System(format!(
                "cannot make a staging directory in {}: {e}",
                tmp.display()
            ))
        };
        let dir = os::open_dir(&tmp, None).map_err(|e| fail(&e))?;
        if dir.others_can_move() {
            return Err(fail(
                &"other users could rename it (set TMPDIR to a sticky directory or one of root's)",
            ));
        }
        let name = dir.make_private_dir(b"goset-deb").map_err(|e| fail(&e))?;
        Ok(Stage(tmp.join(name)))
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd`: its stdout on success, None when the program is not installed; a failure is
/// one line naming the command and what it said.
fn try_output(cmd: &mut Command) -> Result<Option<String>, Error> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::System(format!("cannot run {name}: {e}"))),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        return Err(Error::System(format!(
            "{name} failed ({}): {}",
            out.status,
            said.join("; ")
        )));
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// try_output, for a program the package cannot be built without (`install`: its package).
fn output(cmd: &mut Command, install: &str) -> Result<String, Error> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    try_output(cmd)?.ok_or_else(|| {
        Error::System(format!(
            "{name} not found: a package is built with Debian's tools (apt-get install {install})"
        ))
    })
}

pub fn deb(opts: Deb) -> Result<String, Error> {
    let maintainer = opts.maintainer.trim();
    let well_formed = maintainer.contains(" <")
        && maintainer.ends_with('>')
        && maintainer.contains('@')
        && !maintainer.contains('\n');
    if !well_formed {
        return Err(Error::Usage(format!(
            "--maintainer {maintainer:?}: must be 'Full Name <email@address>'"
        )));
    }
    let arch = output(Command::new("dpkg").arg("--print-architecture"), "dpkg")?
        .trim()
        .to_string();
    // Cargo's pre-release `1.0.0-rc.1` sorts before `1.0.0` as Debian's `1.0.0~rc.1` does.
    let version = env!("CARGO_PKG_VERSION").replace('-', "~");
    // Opened by the root-file rule before anything is built; the package goes there last.
    let out_dir = os::open_dir(&opts.out, Some(0o755))
        .map_err(|e| Error::Usage(format!("--out {}: cannot create: {e}", opts.out.display())))?;
    let stage = Stage::make()?;
    // dpkg-shlibdeps' layout: debian/control, and the package's tree in debian/PACKAGE.
    let root = stage.0.join("debian/goset");
    let place = Place {
        prefix: "/usr".into(),
        destdir: Some(root.clone()),
    };
    install(&place, opts.from)?;

    let items = crate::items(&place.prefix)?;
    let built: Vec<PathBuf> = (items.iter())
        .filter(|i| matches!(i.content, Content::Built(_)))
        .map(|i| root.join("usr").join(&i.path))
        .collect();
    strip(&built)?;
    // As dh_compress leaves them: man finds goset.1.gz as it finds goset.1.
    let pages = (items.iter())
        .filter(|i| i.path.starts_with("share/man"))
        .map(|i| root.join("usr").join(&i.path));
    output(Command::new("gzip").arg("-9n").args(pages), "gzip")?;
    let copyright = root.join("usr/share/doc/goset/copyright");
    crate::write_file(&copyright, COPYRIGHT.as_bytes(), 0o644)?;
    let depends = if opts.no_shlibdeps {
        depends_from_elf(&built)?
    } else {
        match shlibdeps(&stage.0, &built)? {
            Some(depends) => depends,
            None => depends_from_elf(&built)?,
        }
    };

    let installed_kib = tidy(&root)?;
    let control = format!(
        "Package: goset\nVersion: {version}\nArchitecture: {arch}\nMaintainer: {maintainer}\n\
         Installed-Size: {installed_kib}\nDepends: {depends}\nSection: utils\n\
         Priority: optional\nDescription: {DESCRIPTION}\n"
    );
    let debian = root.join("DEBIAN");
    crate::write_file(&debian.join("control"), control.as_bytes(), 0o644)?;
    std::fs::set_permissions(&debian, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::System(format!("cannot chmod {}: {e}", debian.display())))?;

    let name = format!("goset_{version}_{arch}.deb");
    let built = stage.0.join(&name);
    output(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&root)
            .arg(&built),
        "dpkg",
    )?;
    let deb = opts.out.join(&name);
    let fail = |e: std::io::Error| Error::System(format!("cannot write {}: {e}", deb.display()));
    let bytes = std::fs::read(&built).map_err(fail)?;
    out_dir
        .replace(name.as_bytes(), &bytes, 0o644)
        .map_err(fail)?;
    Ok(format!("built {} (Depends: {depends})", deb.display()))
}

/// Strips the programs and the shim as dh_strip does (`--strip-unneeded`): a release build
/// keeps debug information (the workspace's `debug = 1`), which a package does not ship.
fn strip(files: &[PathBuf]) -> Result<(), Error> {
    if try_output(Command::new("strip").arg("--strip-unneeded").args(files))?.is_none() {
        eprintln!("goset-dist: strip not found (binutils): the programs keep their symbols");
    }
    Ok(())
}

/// `shlibs:Depends` as dpkg-shlibdeps computes it for `files`; None without dpkg-shlibdeps.
fn shlibdeps(stage: &Path, files: &[PathBuf]) -> Result<Option<String>, Error> {
    let control = stage.join("debian/control");
    std::fs::write(
        &control,
        "Source: goset\n\nPackage: goset\nArchitecture: any\n",
    )
    .map_err(|e| Error::System(format!("cannot write {}: {e}", control.display())))?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.arg("-O").args(files).current_dir(stage);
    let Some(said) = try_output(&mut cmd)? else {
        return Ok(None);
    };
    let depends = (said.lines())
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .map(str::trim)
        .unwrap_or_default();
    if depends.is_empty() {
        return Err(Error::System(format!(
            "dpkg-shlibdeps gave no shlibs:Depends: {said:?}"
        )));
    }
    Ok(Some(depends.to_string()))
}

/// The Debian package of a library the programs need, and the prefix of its symbol versions.
fn package_of(library: &str) -> Option<(&'static str, &'static str)> {
    const LIBC: [&str; 6] = [
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libutil.so.1",
    ];
    if LIBC.contains(&library) || library.starts_with("ld-linux") || library.starts_with("ld64.") {
        Some(("libc6", "GLIBC_"))
    } else if library == "libgcc_s.so.1" {
        Some(("libgcc-s1", "GCC_"))
    } else {
        None
    }
}

/// A symbol version's number (`GLIBC_2.2.5` -> [2, 2, 5]); None for `GLIBC_PRIVATE`.
fn version_number(name: &str, prefix: &str) -> Option<Vec<u32>> {
    let digits = name.strip_prefix(prefix)?;
    digits.split('.').map(|n| n.parse().ok()).collect()
}

/// `Depends` from the programs' ELF files: each library they need (DT_NEEDED), as its
/// package, at least the newest version of it they need (`.gnu.version_r`). GCC_4.2.0 reads
/// `4.2`, as libgcc-s1's symbols file writes it.
fn depends_from_elf(files: &[PathBuf]) -> Result<String, Error> {
    let mut packages: std::collections::BTreeMap<&str, Option<Vec<u32>>> = Default::default();
    for file in files {
        let bytes = std::fs::read(file)
            .map_err(|e| Error::System(format!("cannot read {}: {e}", file.display())))?;
        let needs = elf::needs(&bytes).ok_or_else(|| {
            Error::System(format!(
                "{}: not an ELF file goset-dist can read",
                file.display()
            ))
        })?;
        for library in &needs.libraries {
            let (package, prefix) = package_of(library).ok_or_else(|| {
                Error::System(format!(
                    "{} needs {library}, whose package only dpkg-shlibdeps can tell: \
                     apt-get install dpkg-dev",
                    file.display()
                ))
            })?;
            let newest = packages.entry(package).or_default();
            for (of, version) in &needs.versions {
                if of != library {
                    continue;
                }
                let number = version_number(version, prefix);
                // None (no version yet, or GLIBC_PRIVATE) sorts first.
                if number > *newest {
                    *newest = number;
                }
            }
        }
    }
    let clauses: Vec<String> = (packages.into_iter())
        .map(|(package, newest)| match newest {
            None => package.to_string(),
            Some(mut number) => {
                while number.len() > 2 && number.last() == Some(&0) {
                    number.pop();
                }
                let number: Vec<String> = number.iter().map(u32::to_string).collect();
                format!("{package} (>= {})", number.join("."))
            }
        })
        .collect();
    Ok(clauses.join(", "))
}

/// Makes every directory under `root` mode 755 (whatever the umask made them) and returns
/// the tree's size in KiB as dpkg-gencontrol counts it: each file rounded up, 1 a directory.
fn tidy(root: &Path) -> Result<u64, Error> {
    let fail = |path: &Path, e: std::io::Error| {
        Error::System(format!("cannot read {}: {e}", path.display()))
    };
    let mut kib = 0;
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail(&dir, e))?;
        for entry in std::fs::read_dir(&dir).map_err(|e| fail(&dir, e))? {
            let path = entry.map_err(|e| fail(&dir, e))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| fail(&path, e))?;
            if meta.is_dir() {
                kib += 1;
                todo.push(path);
            } else {
                kib += meta.len().div_ceil(1024);
            }
        }
    }
    Ok(kib)
}

/// Just enough ELF to read what a program needs of the dynamic linker.
mod elf {
    /// The libraries a file needs and the symbol versions it needs of each.
    pub struct Needs {
        /// DT_NEEDED, in order.
        pub libraries: Vec<String>,
        /// (library, version name) from `.gnu.version_r`.
        pub versions: Vec<(String, String)>,
    }

    const SHT_DYNAMIC: u32 = 6;
    const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
    const DT_NEEDED: u64 = 1;

    struct Reader<'a> {
        bytes: &'a [u8],
        wide: bool,
        big: bool,
    }

    impl Reader<'_> {
        fn uint(&self, at: usize, len: usize) -> Option<u64> {
            let b = self.bytes.get(at..at.checked_add(len)?)?;
            let fold = |acc: u64, byte: &u8| (acc << 8) | u64::from(*byte);
            Some(if self.big {
                b.iter().fold(0, fold)
            } else {
                b.iter().rev().fold(0, fold)
            })
        }
        fn u16(&self, at: usize) -> Option<usize> {
            self.uint(at, 2).map(|v| v as usize)
        }
        fn u32(&self, at: usize) -> Option<usize> {
            self.uint(at, 4).map(|v| v as usize)
        }
        /// A word: 8 bytes in ELF64, 4 in ELF32.
        fn word(&self, at: usize) -> Option<usize> {
            self.uint(at, if self.wide { 8 } else { 4 })
                .and_then(|v| usize::try_from(v).ok())
        }
        fn string(&self, at: usize) -> Option<String> {
            let rest = self.bytes.get(at..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        }
    }

    /// A section header's type, file offset, size and link.
    struct Section {
        kind: u32,
        offset: usize,
        size: usize,
        link: usize,
    }

    pub fn needs(bytes: &[u8]) -> Option<Needs> {
        if bytes.get(..4)? != b"\x7fELF" {
            return None;
        }
        let r = Reader {
            bytes,
            wide: *bytes.get(4)? == 2,
            big: *bytes.get(5)? == 2,
        };
        let (shoff, shentsize, shnum) = if r.wide {
            (r.word(0x28)?, r.u16(0x3a)?, r.u16(0x3c)?)
        } else {
            (r.word(0x20)?, r.u16(0x2e)?, r.u16(0x30)?)
        };
        let mut sections = Vec::new();
        for i in 0..shnum {
            let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
            let (offset, size, link) = if r.wide {
                (r.word(at + 24)?, r.word(at + 32)?, r.u32(at + 40)?)
            } else {
                (r.word(at + 16)?, r.word(at + 20)?, r.u32(at + 24)?)
            };
            sections.push(Section {
                kind: r.u32(at + 4)? as u32,
                offset,
                size,
                link,
            });
        }
        let strings = |s: &Section| sections.get(s.link).map(|t| t.offset);
        let mut needs = Needs {
            libraries: Vec::new(),
            versions: Vec::new(),
        };
        for s in &sections {
            if s.kind == SHT_DYNAMIC {
                let names = strings(s)?;
                let entry = if r.wide { 16 } else { 8 };
                for at in (s.offset..s.offset.checked_add(s.size)?).step_by(entry) {
                    let tag = r.word(at)? as u64;
                    if tag == DT_NEEDED {
                        let value = r.word(at + entry / 2)?;
                        needs.libraries.push(r.string(names.checked_add(value)?)?);
                    }
                }
            } else if s.kind == SHT_GNU_VERNEED {
                // Verneed {version u16, cnt u16, file u32, aux u32, next u32}, its Vernaux
                // {hash u32, flags u16, other u16, name u32, next u32}: the same in ELF32.
                let names = strings(s)?;
                let mut at = s.offset;
                loop {
                    let file = r.string(names.checked_add(r.u32(at + 4)?)?)?;
                    let mut aux = at.checked_add(r.u32(at + 8)?)?;
                    for _ in 0..r.u16(at + 2)? {
                        let name = r.string(names.checked_add(r.u32(aux + 8)?)?)?;
                        needs.versions.push((file.clone(), name));
                        aux = aux.checked_add(r.u32(aux + 12)?)?;
                    }
                    match r.u32(at + 12)? {
                        0 => break,
                        next => at = at.checked_add(next)?,
                    }
                }
            }
        }
        Some(needs)
    }
}
