//! The one clock of every goset process: the kernel's, read through the vDSO the kernel mapped
//! into the process (found from the auxiliary vector), else by a raw system call; never through
//! libc's `clock_gettime`, which another preload may replace. libfaketime does: stacked with the
//! shim, it made the slot table's birth stamps and the shim's CPU-time reads lie, and the
//! newborn count with them. The housekeeper compares its own stamps with the shim's, so both
//! read this one clock.
//!
//! Owns: finding `clock_gettime` in the vDSO image (a read-only walk of its ELF dynamic symbol
//! table, no `dlsym`, so it is safe in a `vfork` child and a signal handler) and the readings
//! goset takes. Must not: allocate, lock, or call libc's clock functions.

use core::sync::atomic::{AtomicUsize, Ordering};

type VdsoClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

/// The vDSO's `clock_gettime` (as an address), 1 when the vDSO has none: looked up once.
static VDSO_FN: AtomicUsize = AtomicUsize::new(0);

#[cfg(target_arch = "x86_64")]
const VDSO_NAME: &[u8] = b"__vdso_clock_gettime";
#[cfg(target_arch = "aarch64")]
const VDSO_NAME: &[u8] = b"__kernel_clock_gettime";

/// Reads `clock` (a `CLOCK_*` id) as seconds and nanoseconds; zero when the kernel refuses it.
pub fn read(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match vdso_fn() {
        // SAFETY: the vDSO's clock_gettime, whose C signature is the one given by the type;
        // `ts` is a valid out-pointer.
        Some(f) => unsafe {
            f(clock, &mut ts);
        },
        None => {
            let args = [
                clock as i64,
                &mut ts as *mut libc::timespec as i64,
                0,
                0,
                0,
                0,
            ];
            // SAFETY: clock_gettime writes one timespec to a valid pointer.
            unsafe { crate::raw::syscall6(libc::SYS_clock_gettime, args) };
        }
    }
    ts
}

/// `clock` in nanoseconds: the resolution a detour probe needs.
pub fn nanos(clock: libc::clockid_t) -> u64 {
    let ts = read(clock);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `clock` in microseconds.
pub fn micros(clock: libc::clockid_t) -> u64 {
    let ts = read(clock);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Microseconds of `CLOCK_MONOTONIC`: the slot table's time, one clock for every process of
/// the task.
pub fn monotonic_us() -> u64 {
    micros(libc::CLOCK_MONOTONIC)
}

/// `clock` in seconds.
pub fn seconds(clock: libc::clockid_t) -> f64 {
    let ts = read(clock);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn vdso_fn() -> Option<VdsoClockGettime> {
    let mut addr = VDSO_FN.load(Ordering::Relaxed);
    if addr == 0 {
        // SAFETY: getauxval only reads the auxiliary vector.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
        // SAFETY: AT_SYSINFO_EHDR is the address of the vDSO's ELF image, mapped readable for
        // the life of the process, or 0.
        addr = (base != 0)
            .then(|| unsafe { find_symbol(base, VDSO_NAME) })
            .flatten()
            .unwrap_or(1);
        VDSO_FN.store(addr, Ordering::Relaxed);
    }
    // SAFETY: an address found in the vDSO's dynamic symbol table under this name is its
    // clock_gettime.
    (addr > 1).then(|| unsafe { core::mem::transmute::<usize, VdsoClockGettime>(addr) })
}

/// An entry of the ELF dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Elf64Dyn {
    d_tag: i64,
    d_un: u64,
}

const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const STT_FUNC: u8 = 2;

/// The address of the defined function `name` in the in-memory ELF image at `base` (the vDSO).
///
/// # Safety
/// `base` is the start of a loaded, readable 64-bit ELF shared object.
unsafe fn find_symbol(base: usize, name: &[u8]) -> Option<usize> {
    use libc::{Elf64_Ehdr, Elf64_Phdr, Elf64_Sym};
    // SAFETY: the caller vouches for an ELF image at base.
    let ehdr = unsafe { &*(base as *const Elf64_Ehdr) };
    if ehdr.e_ident[..4] != *b"\x7fELF" || ehdr.e_ident[4] != 2 {
        return None;
    }
    // SAFETY: the program headers lie inside the image, as its header says.
    let phdrs = unsafe {
        core::slice::from_raw_parts(
            (base + ehdr.e_phoff as usize) as *const Elf64_Phdr,
            ehdr.e_phnum as usize,
        )
    };
    // The vDSO is linked at some address and loaded at another: the load bias.
    let load = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_LOAD && p.p_offset == 0)?;
    let bias = base.wrapping_sub(load.p_vaddr as usize);
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let (mut symtab, mut strtab, mut count) = (0usize, 0usize, 0usize);
    let mut d = bias.wrapping_add(dynamic.p_vaddr as usize) as *const Elf64Dyn;
    loop {
        // SAFETY: the dynamic section is a DT_NULL-terminated array inside the image.
        let entry = unsafe { &*d };
        match entry.d_tag {
            DT_NULL => break,
            DT_SYMTAB => symtab = bias.wrapping_add(entry.d_un as usize),
            DT_STRTAB => strtab = bias.wrapping_add(entry.d_un as usize),
            // DT_HASH: its second word is the number of symbols.
            DT_HASH => {
                // SAFETY: a DT_HASH table starts with nbucket and nchain, both u32.
                count = unsafe { *((bias.wrapping_add(entry.d_un as usize) + 4) as *const u32) }
                    as usize
            }
            _ => {}
        }
        // SAFETY: still inside the array: the terminator has not been met.
        d = unsafe { d.add(1) };
    }
    if symtab == 0 || strtab == 0 {
        return None;
    }
    if count == 0 && strtab > symtab {
        // No DT_HASH: the vDSO's string table follows its symbol table.
        count = (strtab - symtab) / core::mem::size_of::<Elf64_Sym>();
    }
    (0..count.min(4096)).find_map(|i| {
        // SAFETY: i is below the number of symbols the image declares.
        let sym = unsafe { &*((symtab as *const Elf64_Sym).add(i)) };
        let is_func = sym.st_info & 0xf == STT_FUNC;
        if !is_func || sym.st_shndx == 0 || sym.st_value == 0 {
            return None;
        }
        // SAFETY: st_name is an offset into the NUL-terminated string table.
        let sym_name = unsafe {
            core::ffi::CStr::from_ptr((strtab + sym.st_name as usize) as *const libc::c_char)
        };
        (sym_name.to_bytes() == name).then(|| bias.wrapping_add(sym.st_value as usize))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc_now(clock: libc::clockid_t) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
    }

    #[test]
    fn finds_the_vdso_clock() {
        assert!(vdso_fn().is_some(), "no clock_gettime found in this vDSO");
    }

    #[test]
    fn reads_the_same_time_as_libc() {
        for clock in [
            libc::CLOCK_MONOTONIC,
            libc::CLOCK_REALTIME,
            libc::CLOCK_BOOTTIME,
        ] {
            let before = libc_now(clock);
            let ours = micros(clock);
            let after = libc_now(clock);
            assert!(
                before <= ours && ours <= after,
                "{clock}: {before} {ours} {after}"
            );
        }
    }

    #[test]
    fn thread_cpu_time_counts_this_threads_work() {
        let start = micros(libc::CLOCK_THREAD_CPUTIME_ID);
        let mut x = 0u64;
        while micros(libc::CLOCK_THREAD_CPUTIME_ID) < start + 2_000 {
            x = core::hint::black_box(x.wrapping_add(1));
        }
        assert!(x > 0);
    }
}
