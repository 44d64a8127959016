//! Every affinity entry point: `sched_setaffinity`, libc `syscall(SYS_sched_setaffinity)`,
//! `pthread_setaffinity_np`, the attr setters (which are logged and passed through, since
//! `pthread_create` overrides the mask anyway), and the readers `sched_getaffinity`,
//! `syscall(SYS_sched_getaffinity)` and `pthread_getaffinity_np`.
//!
//! Owns: the answer to "thread T asks for mask M": a compute thread gets its own CPU (and
//! success, never EINVAL: libomp aborts on errors); helpers and launcher threads get M clamped
//! to the reservation; threads outside the task are left alone. Either way T's view becomes
//! what the kernel would have set (see [`crate::view`]), and the readers answer with the
//! view: the kernel is asked first, into the caller's buffer, so its checks (EFAULT, EINVAL
//! for a short buffer, ESRCH) and its return value (the bytes written, which libomp sizes its
//! masks from) are kept, and only the bytes it wrote are replaced. Threads the shim does not
//! know (another process's, one it did not place), helpers and launcher threads (whose
//! requests the shim applies, clamped) read their kernel mask. The caller's mask is copied
//! with `process_vm_readv`, so that a bad pointer gets the kernel's EFAULT (the call is passed
//! through) rather than a fault in the shim; a vfork child's calls pass through, since the
//! cached pid, tid and placements it sees are its parent's. Under a seccomp filter (which may
//! kill for a system call the program never makes) the mask is read directly instead, as
//! glibc's own wrapper hands it on. Must not: call libc's `syscall`, `sched_setaffinity` or
//! `sched_getaffinity` (raw syscalls only), allocate, or lock.

use crate::claim::Placement;
use crate::config::Config;
use crate::init;
use crate::log::Event;
use crate::role::Role;
use crate::view::{self, ViewCell};
use crate::{process, real, sys, thread};
use goset_plan::{raw, CpuSet};
use libc::{c_int, pthread_attr_t, pthread_t};

/// Whose mask a request is about.
enum Target {
    /// A thread of this task whose placement is known (tid, placement).
    Placed(i32, Placement),
    /// A thread of this process the shim did not place: clamp.
    Unplaced(i32),
    /// Not ours: pass through.
    Foreign,
}

fn of_tid(cfg: &Config, pid: i32, call: &str) -> Target {
    let me = thread::tid();
    if pid == 0 || pid == me {
        return Target::Placed(me, process::current(cfg, call));
    }
    if pid == process::pid() {
        return Target::Placed(pid, process::main_placement());
    }
    if let Some(k) = thread::find_tid(pid) {
        return Target::Placed(pid, k.placement);
    }
    if let Some((_, slot)) = cfg.table.find(pid) {
        let p = Placement {
            role: Role::Main,
            cpu: cfg.cpu_of_slot(slot),
            slot: Some(slot),
            record: None,
            shared: false,
            roams: false,
        };
        return Target::Placed(pid, p);
    }
    let mut path = crate::buf::Buf::<48>::new();
    let _ = core::fmt::Write::write_fmt(&mut path, format_args!("/proc/self/task/{pid}"));
    match path.c_str() {
        Some(p) if sys::exists(p) => Target::Unplaced(pid),
        _ => Target::Foreign,
    }
}

/// Applies the answer for `target`; the raw result (0 on success).
fn answer(cfg: &Config, target: Target, requested: &CpuSet, call: &str) -> Option<i64> {
    let (tid, p, set) = match target {
        Target::Placed(tid, p) => (tid, p, p.answer(cfg, requested)),
        Target::Unplaced(tid) => (
            tid,
            Placement::unslotted(Role::Unknown, None),
            cfg.clamp(requested),
        ),
        Target::Foreign => return None,
    };
    // The caller itself is addressed as 0.
    let who = if tid == thread::tid() { 0 } else { tid };
    let ret = sys::set_affinity(who, &set);
    if ret < 0 {
        // Our CPU is unusable (hot-unplugged, cgroup changed): let the request through.
        return None;
    }
    if let Some(cell) = view_cell(tid).filter(|_| !p.role.is_clamped()) {
        cell.put(Some(&view::granted(requested)));
    }
    if !thread::repeats_last_set(fingerprint(tid, requested, &set)) {
        process::note(Event::Set, call, tid, Some(requested), &p, Some(&set));
    }
    Some(0)
}

/// The view cell of this process's thread `tid`: `None` for a thread without one (not the
/// shim's, or not in the registry).
fn view_cell(tid: i32) -> Option<&'static ViewCell> {
    if tid == process::pid() {
        Some(thread::main_view())
    } else if tid == thread::tid() {
        thread::own_view()
    } else {
        thread::find_tid(tid).map(|k| k.view)
    }
}

/// The calling thread's view cell, if it has one (a new thread inherits from it).
pub fn own_view() -> Option<&'static ViewCell> {
    view_cell(thread::tid())
}

/// The thread a reader asks about: the tid to ask the kernel about (0: the caller), its role
/// and its view cell.
struct Read {
    tid: i32,
    role: Role,
    cell: Option<&'static ViewCell>,
}

impl Read {
    /// The calling thread.
    fn own() -> Read {
        Read {
            tid: 0,
            role: process::recorded().role,
            cell: own_view(),
        }
    }

    /// This process's main thread.
    fn main() -> Read {
        Read {
            tid: process::pid(),
            role: process::main_placement().role,
            cell: Some(thread::main_view()),
        }
    }

    /// Another placed thread of this process.
    fn known(k: thread::Known) -> Read {
        Read {
            tid: k.tid,
            role: k.placement.role,
            cell: Some(k.view),
        }
    }

    /// What the thread reads: its view, or the task's CPUs when it never asked (or has no
    /// cell). `None` for helpers and launcher threads, which read their kernel mask: the
    /// shim applied their requests for real, clamped to the reservation, and a launcher that
    /// re-applies what it reads (mpirun does, through hwloc) must stay on the housekeeper.
    fn view(&self, cfg: &Config) -> Option<CpuSet> {
        if self.role.is_clamped() {
            return None;
        }
        Some(
            self.cell
                .and_then(ViewCell::get)
                .unwrap_or_else(|| cfg.task_set()),
        )
    }
}

/// A hash of the target, the requested mask and the applied mask (word at a time: this runs
/// on every affinity call).
fn fingerprint(tid: i32, requested: &CpuSet, applied: &CpuSet) -> u64 {
    let mut h = tid as u32 as u64 ^ 0x9e37_79b9_7f4a_7c15;
    for &w in requested.words().iter().chain(applied.words()) {
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    h | 1
}

/// Bytes of a caller's mask the shim looks at: a [`CpuSet`]'s worth (1024 CPUs).
const MASK_BYTES: usize = core::mem::size_of::<CpuSet>();

/// The caller's `len`-byte mask at `mask`, copied without dereferencing it (but see the
/// seccomp case below), or `None` when the
/// kernel would answer EFAULT: the call is then passed through so that the caller gets that
/// answer. `me` is the raw pid of this process.
///
/// # Safety
/// None for a bad pointer while `process_vm_readv` is usable. Under a seccomp filter (which may
/// kill the process for a system call it does not expect) or where the call fails with an
/// errno, the mask is read directly, as glibc's own wrapper hands it on: it must be readable.
unsafe fn copy_request(me: i32, mask: *const u8, len: usize) -> Option<CpuSet> {
    if sys::seccomp_filtered() {
        // SAFETY: the caller vouches for the mask when process_vm_readv may not be used.
        return Some(unsafe { CpuSet::from_raw(mask, len) });
    }
    let want = len.min(MASK_BYTES);
    let mut bytes = [0u8; MASK_BYTES];
    let got = match sys::read_own(me, mask, &mut bytes[..want]) {
        Ok(n) if n == want => want,
        Ok(_) | Err(libc::EFAULT) => {
            // The kernel reads only its own mask size of a longer mask, so a mask whose tail
            // runs into unmapped memory may still be fine for it.
            let need = sys::kernel_mask_bytes().unwrap_or(want).min(want);
            if need == want || sys::read_own(me, mask, &mut bytes[..need]) != Ok(need) {
                return None;
            }
            need
        }
        // SAFETY: the caller vouches for the mask when process_vm_readv cannot check it.
        Err(_) => return Some(unsafe { CpuSet::from_raw(mask, len) }),
    };
    // SAFETY: bytes holds `got` bytes, all copied above.
    Some(unsafe { CpuSet::from_raw(bytes.as_ptr(), got) })
}

/// What every mask-setting hook needs before it may answer: not re-entered, configured, not in
/// a `vfork` child, and the caller's mask copied. `None`: pass the call through.
///
/// # Safety
/// As [`copy_request`].
unsafe fn intercept(
    mask: *const u8,
    len: usize,
) -> Option<(thread::Guard, &'static Config, CpuSet)> {
    if mask.is_null() {
        return None;
    }
    let guard = thread::Guard::enter()?;
    let cfg = init::get()?;
    let me = process::own_pid()?;
    // SAFETY: as this function's contract.
    let requested = unsafe { copy_request(me, mask, len) }?;
    Some((guard, cfg, requested))
}

/// `sched_setaffinity` and `syscall(SYS_sched_setaffinity, ...)`: the raw result.
///
/// # Safety
/// The arguments of `sched_setaffinity`; a bad `mask` gets EFAULT (see [`copy_request`]).
pub unsafe fn sched_set(pid: i32, len: usize, mask: *const u8, call: &str) -> i64 {
    // SAFETY: the caller's arguments, unchanged.
    let pass = || unsafe { sys::set_affinity_raw(pid, len, mask) };
    if pid < 0 {
        return pass();
    }
    // SAFETY: as this function's contract.
    let Some((_guard, cfg, requested)) = (unsafe { intercept(mask, len) }) else {
        return pass();
    };
    let target = of_tid(cfg, pid, call);
    answer(cfg, target, &requested, call).unwrap_or_else(pass)
}

/// `pthread_setaffinity_np`: an error number, as pthread functions return.
///
/// # Safety
/// The arguments of `pthread_setaffinity_np`; a bad `mask` gets the real function's EFAULT.
pub unsafe fn pthread_set(thread: pthread_t, len: usize, mask: *const libc::cpu_set_t) -> c_int {
    let pass = || match real::pthread_setaffinity_np() {
        // SAFETY: the caller's arguments, unchanged.
        Some(f) => unsafe { f(thread, len, mask) },
        None => libc::ENOSYS,
    };
    // SAFETY: as this function's contract.
    let Some((_guard, cfg, requested)) = (unsafe { intercept(mask.cast(), len) }) else {
        return pass();
    };
    let call = "pthread_setaffinity_np";
    // SAFETY: pthread_self and pthread_equal have no preconditions.
    let target = if unsafe { libc::pthread_equal(thread, libc::pthread_self()) } != 0 {
        Target::Placed(thread::tid(), process::current(cfg, call))
    } else if let Some(k) = thread::find_thread(thread) {
        Target::Placed(k.tid, k.placement)
    } else if process::is_main_thread(thread) {
        Target::Placed(process::pid(), process::main_placement())
    } else {
        // A thread we cannot name by tid: clamp through the real call.
        let set = cfg.clamp(&requested);
        let (ptr, size) = set.as_raw();
        let ret = match real::pthread_setaffinity_np() {
            // SAFETY: thread is the caller's; ptr/size describe a live CpuSet.
            Some(f) => unsafe { f(thread, size, ptr.cast()) },
            None => libc::ENOSYS,
        };
        let p = Placement::unslotted(Role::Unknown, None);
        process::note(Event::Set, call, 0, Some(&requested), &p, Some(&set));
        return if ret == 0 { 0 } else { pass() };
    };
    match answer(cfg, target, &requested, call) {
        Some(_) => 0,
        None => pass(),
    }
}

/// The raw `sched_getaffinity(tid, len, mask)`, into the caller's buffer.
///
/// # Safety
/// None beyond the system call's own: the kernel checks the buffer.
unsafe fn get_raw(tid: i32, len: usize, mask: *mut u8) -> i64 {
    // SAFETY: the kernel writes at most len bytes at mask, checking the range itself.
    unsafe {
        raw::syscall6(
            libc::SYS_sched_getaffinity,
            [tid as i64, len as i64, mask as i64, 0, 0, 0],
        )
    }
}

/// What every reader needs before it may answer with a view: not re-entered, configured, not
/// in a `vfork` child. `None`: the kernel's answer stands.
fn reading() -> Option<(thread::Guard, &'static Config)> {
    let guard = thread::Guard::enter()?;
    let cfg = init::get()?;
    process::own_pid()?;
    Some((guard, cfg))
}

/// `syscall(SYS_sched_getaffinity, pid, len, mask)`: the kernel's raw result (the bytes it
/// wrote, or -errno), those bytes holding the view of thread `pid` (0: the caller).
///
/// # Safety
/// The arguments of the system call; a bad buffer gets the kernel's EFAULT.
pub unsafe fn sched_get(pid: i32, len: usize, mask: *mut u8) -> i64 {
    // SAFETY: the caller's arguments, unchanged.
    let ret = unsafe { get_raw(pid, len, mask) };
    if ret <= 0 {
        return ret;
    }
    let Some((_guard, cfg)) = reading() else {
        return ret;
    };
    let read = if pid == 0 || pid == thread::tid() {
        Read::own()
    } else if pid == process::pid() {
        Read::main()
    } else {
        match thread::find_tid(pid) {
            Some(k) => Read::known(k),
            // Not a thread the shim placed in this process: its kernel mask.
            None => return ret,
        }
    };
    if let Some(view) = read.view(cfg) {
        // SAFETY: the kernel has just written ret bytes at mask.
        unsafe { view::fill(mask, ret as usize, &view) };
    }
    ret
}

/// libc's `sched_getaffinity`: 0, or -1 with errno; as glibc does, the kernel is given at most
/// `INT_MAX` bytes and the rest of the caller's buffer is zeroed.
///
/// # Safety
/// The arguments of `sched_getaffinity`: `mask` writable for `size` bytes.
pub unsafe fn sched_get_libc(pid: i32, size: usize, mask: *mut u8) -> c_int {
    // SAFETY: as this function's contract.
    let ret = unsafe { sched_get(pid, size.min(i32::MAX as usize), mask) };
    if let Some(e) = sys::error_of(ret) {
        sys::set_errno(e);
        return -1;
    }
    // SAFETY: mask is writable for size bytes (the caller's promise, as with glibc).
    unsafe { view::zero_rest(mask, ret as usize, size) };
    0
}

/// `pthread_getaffinity_np`: 0 or an error number, the view of `thread` in the caller's
/// buffer (zeroed past what the kernel wrote, as glibc does). A thread the shim cannot name
/// by tid goes to the real function.
///
/// # Safety
/// The arguments of `pthread_getaffinity_np`.
pub unsafe fn pthread_get(thread: pthread_t, size: usize, mask: *mut libc::cpu_set_t) -> c_int {
    let pass = || match real::pthread_getaffinity_np() {
        // SAFETY: the caller's arguments, unchanged.
        Some(f) => unsafe { f(thread, size, mask) },
        None => libc::ENOSYS,
    };
    let Some((_guard, cfg)) = reading() else {
        return pass();
    };
    // SAFETY: pthread_self and pthread_equal have no preconditions.
    let read = if unsafe { libc::pthread_equal(thread, libc::pthread_self()) } != 0 {
        Read::own()
    } else if let Some(k) = thread::find_thread(thread) {
        Read::known(k)
    } else if process::is_main_thread(thread) {
        Read::main()
    } else {
        return pass();
    };
    let mask = mask.cast::<u8>();
    // SAFETY: the caller's buffer; the kernel checks it.
    let ret = unsafe { get_raw(read.tid, size, mask) };
    if let Some(e) = sys::error_of(ret) {
        return e;
    }
    if let Some(view) = read.view(cfg) {
        // SAFETY: the kernel has just written ret bytes at mask.
        unsafe { view::fill(mask, ret as usize, &view) };
    }
    // SAFETY: the caller promises size writable bytes, as with glibc.
    unsafe { view::zero_rest(mask, ret as usize, size) };
    0
}

/// Logs an attr mask (it is replaced at `pthread_create`), with what the calling thread holds
/// (nothing is claimed for a thread the shim has not placed: this is only a log line).
///
/// # Safety
/// `attr` must be an initialised attribute object.
pub unsafe fn note_attr(attr: *const pthread_attr_t, call: &str) {
    let Some(_guard) = thread::Guard::enter() else {
        return;
    };
    if init::get().is_none() {
        return;
    }
    if attr.is_null() || !crate::log::enabled() || process::own_pid().is_none() {
        return;
    }
    // SAFETY: attr is initialised (caller).
    let requested = unsafe { crate::attr::affinity_of(attr) };
    let p = process::recorded();
    process::note(
        Event::Set,
        call,
        thread::tid(),
        requested.as_ref(),
        &p,
        Some(&CpuSet::new()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_a_readable_mask() {
        let set: CpuSet = [0, 9, 1023].into_iter().collect();
        let (ptr, len) = set.as_raw();
        // SAFETY: ptr/len describe a live CpuSet.
        assert_eq!(unsafe { copy_request(sys::getpid(), ptr, len) }, Some(set));
        // A short mask: the rest is empty; a longer one: only a CpuSet's worth is looked at.
        let short = [0x06u8];
        // SAFETY: one readable byte.
        let got = unsafe { copy_request(sys::getpid(), short.as_ptr(), 1) };
        assert_eq!(got, Some([1, 2].into_iter().collect()));
        let long = [0xffu8; 2 * MASK_BYTES];
        // SAFETY: readable for its length.
        let got = unsafe { copy_request(sys::getpid(), long.as_ptr(), long.len()) };
        assert_eq!(got.map(|s| s.count()), Some(goset_plan::MAX_CPUS));
    }

    #[test]
    fn a_bad_mask_is_left_to_the_kernel() {
        // SAFETY: process_vm_readv checks the pointer; nothing is dereferenced.
        assert_eq!(
            unsafe { copy_request(sys::getpid(), 0x10 as *const u8, 128) },
            None
        );
    }

    #[test]
    fn a_mask_ending_in_unmapped_memory_is_read_as_the_kernel_reads_it() {
        let kernel = sys::kernel_mask_bytes().unwrap();
        // SAFETY: a private two-page mapping whose second page is made inaccessible; the
        // masks end at its first page's end, and it is unmapped at the end.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let map = libc::mmap(
                core::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let second = map.cast::<u8>().add(page);
            assert_eq!(libc::mprotect(second.cast(), page, libc::PROT_NONE), 0);
            // All the kernel reads is there: it accepts the mask, and so does the copy.
            let mask = second.sub(kernel);
            *mask = 0x02;
            let got = copy_request(sys::getpid(), mask, MASK_BYTES);
            assert_eq!(got, Some(CpuSet::single(1)));
            // Less than the kernel reads: it refuses (so this changes nothing), and the copy
            // says so.
            let mask = second.sub(kernel - 8);
            let bare = sys::set_affinity_raw(0, MASK_BYTES, mask);
            assert_eq!(sys::error_of(bare), Some(libc::EFAULT));
            assert_eq!(copy_request(sys::getpid(), mask, MASK_BYTES), None);
            libc::munmap(map, 2 * page);
        }
    }
}
