//! The slot table's memory: a shared mapping of a file of the run directory, of a sealed memfd,
//! or anonymous memory that `fork`ed children share.
//!
//! Owns: creating, sealing, linking and mapping the table's file. Must not: read or write the
//! table's fields (that is [`super::SlotTable`]'s).

use super::table::SlotTable;

/// Maps the table from `fd` (a file of at least [`SlotTable::SIZE`] bytes, created with
/// [`create_file`]), or an anonymous shared mapping when `fd` is `None`, which `fork`ed
/// children share. The mapping lives until the process ends. Allocation-free.
pub fn map(fd: Option<i32>) -> Option<&'static SlotTable> {
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd),
        None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
    };
    // SAFETY: a fresh mapping of SIZE bytes; no existing memory is touched.
    let addr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            SlotTable::SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is page-aligned, SIZE bytes long, never unmapped, and all-zero bytes
    // (a new file or anonymous memory) are a valid table since every field is an atomic.
    Some(unsafe { &*(addr as *const SlotTable) })
}

/// Creates the table for `slot_count` slots and makes `path` name it (launcher side). The
/// table is a memfd sealed against shrinking and growing: the task may write anything into
/// it, but no process can truncate it under the launcher's mapping (a read past the end of a
/// mapped file is SIGBUS). `path` is a symlink to `/proc/<launcher pid>/fd/<n>`, which the
/// task's processes (the same user) open like the file it stands for: a regular file of
/// [`SlotTable::SIZE`] bytes. Replacing `path` changes nothing for the returned mapping. The
/// descriptor, like the mapping, stays open for the rest of the launcher's life.
pub fn create_file(
    path: &std::path::Path,
    slot_count: usize,
) -> std::io::Result<&'static SlotTable> {
    let (fd, table) = create_sealed(slot_count)?;
    link_file(path, std::process::id(), fd)?;
    Ok(table)
}

/// The sealed memfd of [`create_file`] with the table mapped and set up for `slot_count`
/// slots, not yet named by a path. The descriptor stays open for the rest of the process's
/// life (a link names it).
pub fn create_sealed(
    slot_count: usize,
) -> std::io::Result<(std::os::fd::RawFd, &'static SlotTable)> {
    use std::os::fd::{AsRawFd, IntoRawFd};
    let file = memfd()?;
    file.set_len(SlotTable::SIZE as u64)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let table = map(Some(file.as_raw_fd())).ok_or_else(std::io::Error::last_os_error)?;
    table.init(slot_count);
    Ok((file.into_raw_fd(), table))
}

/// Makes `path` a symlink to descriptor `fd` of process `pid` (`/proc/<pid>/fd/<fd>`), which
/// processes allowed to look at `pid`'s descriptors open like the file it stands for.
pub fn link_file(path: &std::path::Path, pid: u32, fd: std::os::fd::RawFd) -> std::io::Result<()> {
    std::os::unix::fs::symlink(format!("/proc/{pid}/fd/{fd}"), path)
}

/// A new sealable memfd, not executable where the kernel knows the flag (Linux 6.3: with
/// `vm.memfd_noexec=2` a memfd without it is refused).
fn memfd() -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let name = c"goset-slots";
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    let mut fd = -1;
    for extra in [libc::MFD_NOEXEC_SEAL, 0] {
        // SAFETY: name is NUL-terminated; the call only returns a new descriptor.
        fd = unsafe { libc::memfd_create(name.as_ptr(), flags | extra) };
        if fd >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            break;
        }
    }
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor that nothing else owns.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}
