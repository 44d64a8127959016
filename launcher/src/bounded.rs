//! Opening and reading files that someone else controls: the placement log (the task writes
//! it, and may replace it), the files of an `--fsroot` dump, `/proc`.
//!
//! Owns: opening without blocking and only regular files, and reading no more than a cap, so
//! that no file can hang the launcher (a FIFO blocks in `open`, a pipe's read waits for every
//! writer) or make it read until memory runs out (`/dev/zero`, a log appended without end).
//! Must not: parse, or decide what a refusal means to the run.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// The error for a path that names a device, a FIFO, a socket or a directory.
pub fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")
}

/// The error for a file longer than `cap` bytes.
pub fn too_long(cap: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("longer than {cap} bytes: not read"),
    )
}

/// Opens `path` with `options`, without blocking and only if it is a regular file (after
/// symlinks): anything else is refused with [`not_regular`]. `O_NONBLOCK` makes `open` of a
/// FIFO return at once (for writing without a reader: ENXIO, refused as well); it changes
/// nothing for a regular file. `O_NOCTTY`: a terminal never becomes the launcher's.
pub fn open_regular(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = options
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A FIFO without a reader, or a socket.
            Some(libc::ENXIO) => not_regular(),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// Creates `path` (0600: its owner's alone to read), or empties it when it is a regular file;
/// anything else is refused with [`not_regular`], before anything is truncated.
pub fn create_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = open_regular(
        path,
        OpenOptions::new().write(true).create(true).mode(0o600),
    )?;
    file.set_len(0)?;
    Ok(file)
}

/// Reads the regular file `path` whole, if it holds at most `cap` bytes; a longer one is
/// refused with [`too_long`], having read `cap` + 1 bytes of it.
pub fn read_regular(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, OpenOptions::new().read(true))?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_long(cap));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for path in [
            Path::new("/dev/zero"),
            Path::new("/dev/full"),
            &fifo,
            dir.path(),
        ] {
            let e = read_regular(path, 1 << 20).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file", "{}", path.display());
            assert!(create_regular(path).is_err(), "{}", path.display());
        }
        // A FIFO that has a reader is still not a log.
        let reader = open_regular(&fifo, OpenOptions::new().read(true));
        assert!(reader.is_err());
    }

    #[test]
    fn a_file_over_the_cap_is_refused_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [b'x'; 4096]).unwrap();
        assert_eq!(read_regular(&path, 4096).unwrap().len(), 4096);
        let e = read_regular(&path, 4095).unwrap_err();
        assert_eq!(e.to_string(), "longer than 4095 bytes: not read");
        let f = create_regular(&path).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0, "emptied");
    }
}
