//! How the task's command is loaded, read from its ELF headers: by glibc's dynamic loader, by
//! another one (musl's), or by nobody (static).
//!
//! Owns: the bounded reading of an executable's ELF header, program headers and `PT_INTERP`
//! path (32 and 64 bit, either byte order), the rule that tells glibc's loader from others,
//! and whether the kernel will start the file secure-exec (`AT_SECURE`: glibc then ignores a
//! preload named by path). Must not: run or map the file, or fail the launch: whatever is not
//! a readable ELF executable (a script, a truncated file) is [`Linkage::NotElf`], simply not
//! inspected.

use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How an executable is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linkage {
    /// Not a readable ELF executable (a script, a truncated or foreign file).
    NotElf,
    /// No program interpreter: the kernel starts it directly (`-static`, static-pie, Go).
    Static,
    /// Loaded by this program interpreter (`PT_INTERP`).
    Dynamic(PathBuf),
}

/// Largest program header table read (real ones hold a dozen 56-byte entries).
const MAX_PHDRS_BYTES: u64 = 64 * 1024;
/// Longest interpreter path read (`PATH_MAX`).
const MAX_INTERP_BYTES: u64 = 4096;
const PT_INTERP: u32 = 3;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;

/// The fields of an ELF header that locate the program headers.
struct Header {
    is64: bool,
    little: bool,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
}

impl Header {
    fn u16(&self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }

    /// An address-sized word: 8 bytes in ELF64, 4 in ELF32.
    fn word(&self, b: &[u8]) -> u64 {
        if !self.is64 {
            return self.u32(b).into();
        }
        let a: [u8; 8] = b[..8].try_into().expect("8 bytes");
        if self.little {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }

    /// Parses the first 64 bytes of a file; `None` unless it is an ELF executable.
    fn parse(b: &[u8; 64]) -> Option<Header> {
        if &b[..4] != b"\x7fELF" {
            return None;
        }
        let is64 = match b[4] {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little = match b[5] {
            1 => true,
            2 => false,
            _ => return None,
        };
        let mut h = Header {
            is64,
            little,
            phoff: 0,
            phentsize: 0,
            phnum: 0,
        };
        if !matches!(h.u16(&b[16..]), ET_EXEC | ET_DYN) {
            return None;
        }
        // e_phoff, e_phentsize and e_phnum sit after the entry point, whose size is a word.
        let (phoff_at, phentsize_at) = if is64 { (32, 54) } else { (28, 42) };
        h.phoff = h.word(&b[phoff_at..]);
        h.phentsize = h.u16(&b[phentsize_at..]).into();
        h.phnum = h.u16(&b[phentsize_at + 2..]).into();
        let min_entry = if is64 { 56 } else { 32 };
        (h.phentsize >= min_entry).then_some(h)
    }
}

fn read_at<R: Read + Seek>(r: &mut R, offset: u64, len: u64) -> Option<Vec<u8>> {
    r.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = vec![0; usize::try_from(len).ok()?];
    r.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// Reads how the executable in `r` is loaded: its ELF header, its program headers (at most
/// 64 KiB) and its `PT_INTERP` path (at most 4 KiB). Anything unreadable is `NotElf`.
pub fn read<R: Read + Seek>(r: &mut R) -> Linkage {
    read_inner(r).unwrap_or(Linkage::NotElf)
}

fn read_inner<R: Read + Seek>(r: &mut R) -> Option<Linkage> {
    let head: [u8; 64] = read_at(r, 0, 64)?.try_into().ok()?;
    let h = Header::parse(&head)?;
    let table_len = h.phentsize.checked_mul(h.phnum)?;
    if table_len > MAX_PHDRS_BYTES {
        return None;
    }
    let table = read_at(r, h.phoff, table_len)?;
    // p_offset follows p_type (and p_flags in ELF64); p_filesz follows p_vaddr and p_paddr.
    let (offset_at, filesz_at) = if h.is64 { (8, 32) } else { (4, 16) };
    for entry in table.chunks_exact(h.phentsize as usize) {
        if h.u32(entry) != PT_INTERP {
            continue;
        }
        let len = h.word(&entry[filesz_at..]);
        if len == 0 || len > MAX_INTERP_BYTES {
            return None;
        }
        let text = read_at(r, h.word(&entry[offset_at..]), len)?;
        let path = text.split(|&c| c == 0).next().unwrap_or_default();
        return Some(Linkage::Dynamic(OsStr::from_bytes(path).into()));
    }
    Some(Linkage::Static)
}

/// Reads the executable at `path` (see [`read`]); a file that cannot be opened is `NotElf`.
pub fn read_file(path: &Path) -> Linkage {
    match std::fs::File::open(path) {
        Ok(mut f) => read(&mut f),
        Err(_) => Linkage::NotElf,
    }
}

/// Whether `interpreter` is glibc's dynamic loader, by its file name: `ld-linux*` (x86, Arm,
/// RISC-V ...), `ld64.so.*` (POWER, s390x) or `ld.so.1` (32-bit POWER, MIPS, s390).
pub fn is_glibc_loader(interpreter: &Path) -> bool {
    let name = interpreter
        .file_name()
        .map(OsStrExt::as_bytes)
        .unwrap_or_default();
    name.starts_with(b"ld-linux") || name.starts_with(b"ld64.so.") || name == b"ld.so.1"
}

/// Whether executing `path` would be secure-exec for this process: a set-user-id or
/// set-group-id file of another user or group, or one with file capabilities. A file that
/// cannot be inspected counts as secure-exec.
pub fn is_secure_exec(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return true;
    };
    // SAFETY: geteuid and getegid cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let setuid = meta.mode() & libc::S_ISUID != 0 && meta.uid() != euid;
    let setgid = meta.mode() & libc::S_ISGID != 0 && meta.gid() != egid;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: both names are NUL-terminated; a zero-sized read only asks whether it exists.
    let caps = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    } >= 0;
    setuid || setgid || caps
}

impl Linkage {
    /// Whether libgoset.so will load into this program: a glibc program (a script is not
    /// inspected, so it is not counted).
    pub fn loads_shim(&self) -> bool {
        matches!(self, Linkage::Dynamic(interp) if is_glibc_loader(interp))
    }

    /// Why libgoset.so cannot load into this program, for a note on stderr; `None` for a
    /// glibc program and for what was not inspected.
    pub fn why_no_shim(&self) -> Option<String> {
        match self {
            Linkage::NotElf => None,
            Linkage::Dynamic(interp) if is_glibc_loader(interp) => None,
            Linkage::Static => Some("statically linked".into()),
            Linkage::Dynamic(interp) => Some(format!(
                "loaded by {}, not by glibc's loader",
                interp.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A minimal ELF file: header, `phdrs` program headers right after it, then `interp`.
    fn elf(is64: bool, little: bool, e_type: u16, interp: Option<&[u8]>) -> Vec<u8> {
        let (hsize, psize) = if is64 { (64usize, 56usize) } else { (52, 32) };
        let mut f = vec![0u8; hsize + psize];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = if is64 { 2 } else { 1 };
        f[5] = if little { 1 } else { 2 };
        let put = |f: &mut Vec<u8>, at: usize, v: u64, n: usize| {
            let bytes = if little {
                v.to_le_bytes()[..n].to_vec()
            } else {
                v.to_be_bytes()[8 - n..].to_vec()
            };
            f[at..at + n].copy_from_slice(&bytes);
        };
        let w = if is64 { 8 } else { 4 };
        put(&mut f, 16, e_type.into(), 2);
        let (phoff_at, phentsize_at) = if is64 { (32, 54) } else { (28, 42) };
        put(&mut f, phoff_at, hsize as u64, w);
        put(&mut f, phentsize_at, psize as u64, 2);
        put(&mut f, phentsize_at + 2, 1, 2);
        let (offset_at, filesz_at) = if is64 { (8, 32) } else { (4, 16) };
        let p_type = if interp.is_some() { PT_INTERP } else { 1 };
        put(&mut f, hsize, p_type.into(), 4);
        if let Some(path) = interp {
            let at = f.len() as u64;
            put(&mut f, hsize + offset_at, at, w);
            put(&mut f, hsize + filesz_at, path.len() as u64 + 1, w);
            f.extend_from_slice(path);
            f.push(0);
        }
        // The 64-byte header read needs a file at least that long.
        f.resize(f.len().max(64), 0);
        f
    }

    fn linkage(bytes: Vec<u8>) -> Linkage {
        read(&mut Cursor::new(bytes))
    }

    #[test]
    fn only_set_id_files_of_others_and_files_with_capabilities_are_secure_exec() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x");
        std::fs::write(&file, "").unwrap();
        assert!(!is_secure_exec(&file));
        // Set-user-id, but ours: the kernel starts it as ever.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert!(!is_secure_exec(&file));
        assert!(is_secure_exec(&dir.path().join("missing")));
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 && Path::new("/usr/bin/passwd").exists() {
            // Root runs a set-user-id-root file without AT_SECURE.
            assert!(!is_secure_exec(Path::new("/usr/bin/passwd")));
        }
    }

    #[test]
    fn reads_the_interpreter_in_every_class_and_byte_order() {
        let musl = b"/lib/ld-musl-x86_64.so.1";
        for (is64, little) in [(true, true), (true, false), (false, true), (false, false)] {
            assert_eq!(
                linkage(elf(is64, little, ET_DYN, Some(musl))),
                Linkage::Dynamic(PathBuf::from("/lib/ld-musl-x86_64.so.1")),
                "is64 {is64} little {little}"
            );
            assert_eq!(
                linkage(elf(is64, little, ET_EXEC, None)),
                Linkage::Static,
                "is64 {is64} little {little}"
            );
        }
    }

    #[test]
    fn what_is_not_an_elf_executable_is_not_inspected() {
        assert_eq!(linkage(b"#!/bin/sh\necho hi\n".to_vec()), Linkage::NotElf);
        assert_eq!(linkage(Vec::new()), Linkage::NotElf);
        // An object file (ET_REL) or a core dump is no executable.
        assert_eq!(linkage(elf(true, true, 1, None)), Linkage::NotElf);
        // Cut inside the program headers, or inside the interpreter's path.
        let full = elf(true, true, ET_DYN, Some(b"/lib64/ld-linux-x86-64.so.2"));
        assert_eq!(linkage(full[..70].to_vec()), Linkage::NotElf);
        assert_eq!(linkage(full[..full.len() - 5].to_vec()), Linkage::NotElf);
        // A program header table larger than any real one is not read.
        let mut huge = elf(true, true, ET_DYN, None);
        huge[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
        assert_eq!(linkage(huge), Linkage::NotElf);
        // Program headers too small to hold the fields.
        let mut small = elf(true, true, ET_DYN, None);
        small[54..56].copy_from_slice(&8u16.to_le_bytes());
        assert_eq!(linkage(small), Linkage::NotElf);
    }

    #[test]
    fn glibc_loaders_by_name() {
        for glibc in [
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/ld-linux-aarch64.so.1",
            "/lib/ld-linux.so.2",
            "/lib64/ld64.so.2",
            "/lib/ld.so.1",
        ] {
            assert!(is_glibc_loader(Path::new(glibc)), "{glibc}");
            assert_eq!(Linkage::Dynamic(glibc.into()).why_no_shim(), None);
        }
        for other in ["/lib/ld-musl-x86_64.so.1", "/system/bin/linker64", ""] {
            assert!(!is_glibc_loader(Path::new(other)), "{other}");
        }
        assert_eq!(
            Linkage::Dynamic("/lib/ld-musl-x86_64.so.1".into()).why_no_shim(),
            Some("loaded by /lib/ld-musl-x86_64.so.1, not by glibc's loader".into())
        );
        assert_eq!(
            Linkage::Static.why_no_shim(),
            Some("statically linked".into())
        );
        assert_eq!(Linkage::NotElf.why_no_shim(), None);
    }

    #[test]
    fn this_test_binary_is_a_glibc_program() {
        let exe = std::env::current_exe().unwrap();
        match read_file(&exe) {
            Linkage::Dynamic(interp) => assert!(is_glibc_loader(&interp), "{interp:?}"),
            other => panic!("{}: {other:?}", exe.display()),
        }
        assert_eq!(read_file(Path::new("/nonexistent/goset")), Linkage::NotElf);
    }
}
