//! The system call entry, in inline assembly: the shim replaces libc's `syscall`, and another
//! preload may replace any libc wrapper, so what must reach the kernel goes straight there.
//!
//! Owns: [`syscall6`] for x86_64 and aarch64. Must not: touch errno, allocate, or panic.

use core::arch::asm;

/// Issues system call `n` with six arguments; returns the kernel's raw result (`-errno` on
/// failure).
///
/// # Safety
/// The arguments must be valid for the call, as for libc's `syscall`.
#[inline]
pub unsafe fn syscall6(n: i64, a: [i64; 6]) -> i64 {
    let ret: i64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the x86_64 Linux syscall ABI: number in rax, arguments in rdi, rsi, rdx, r10,
    // r8, r9; the kernel clobbers rcx and r11. The caller vouches for the arguments.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the aarch64 Linux syscall ABI: number in x8, arguments in x0..x5, result in x0.
    // The caller vouches for the arguments.
    unsafe {
        asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    ret
}
