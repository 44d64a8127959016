//! Unit tests of the raw system calls.

use super::*;

#[test]
fn raw_calls_work() {
    assert_eq!(getpid(), std::process::id() as i32);
    assert!(gettid() > 0);
    assert!(get_affinity(0).is_some_and(|s| !s.is_empty()));
    assert!(exists(b"/proc/self\0"));
    assert!(!exists(b"/proc/self/no-such-file\0"));
    assert_eq!(error_of(-2), Some(2));
    assert_eq!(error_of(5), None);
    let k = kernel_mask_bytes().unwrap();
    assert!(k > 0 && k <= core::mem::size_of::<CpuSet>() && k.is_multiple_of(8));
}

#[test]
fn read_own_copies_and_reports_bad_memory() {
    let src = [7u8, 8, 9];
    let mut out = [0u8; 3];
    assert_eq!(read_own(getpid(), src.as_ptr(), &mut out), Ok(3));
    assert_eq!(out, src);
    assert_eq!(
        read_own(getpid(), 0x10 as *const u8, &mut out),
        Err(libc::EFAULT)
    );
    assert_eq!(read_own(getpid(), core::ptr::null(), &mut []), Ok(0));
}

#[test]
fn the_reader_takes_small_regular_files_only() {
    let mut buf = [0u8; 64];
    assert_eq!(
        read_whole(b"/proc/self/stat\0", &mut buf),
        Err(FileError::TooBig)
    );
    let n = read_prefix(b"/proc/self/stat\0", &mut buf).unwrap();
    assert_eq!(n, 64);
    let mut big = [0u8; 4096];
    let n = read_whole(b"/proc/self/stat\0", &mut big).unwrap();
    assert!(big[..n].ends_with(b"\n"));
    assert_eq!(
        read_whole(b"/dev/null\0", &mut buf),
        Err(FileError::NotRegular)
    );
    assert_eq!(
        read_whole(b"/proc/self\0", &mut buf),
        Err(FileError::NotRegular)
    );
    assert_eq!(
        read_whole(b"/no/such/file\0", &mut buf),
        Err(FileError::Os(libc::ENOENT))
    );
}

#[test]
fn dup_high_moves_a_descriptor_up_and_keeps_its_file() {
    let fd = open(b"/proc/self/stat\0", libc::O_RDONLY | libc::O_CLOEXEC, 0).unwrap();
    let high = dup_high(fd);
    assert!(high >= 512 || high > fd, "{high}");
    assert_eq!(identity(high), identity(fd));
    close(fd);
    close(high);
    assert_eq!(identity(high), None);
}
