//! The CPU mask a thread's attributes ask for, and a copy of them without it, so that the
//! shim's choice replaces a runtime's mask without the caller's attribute object ever being
//! changed.
//!
//! Owns: field-by-field copying of a `pthread_attr_t` (glibc keeps the CPU mask and signal mask
//! behind a pointer, so a byte copy would share them). Must not: touch the caller's attr, or
//! set a mask in an attr: glibc allocates on the program's heap for one (two calls, which an
//! allocation profiler counts), so a thread takes its CPU itself (`crate::create`).

use crate::real;
use core::mem::MaybeUninit;
use goset_plan::CpuSet;
use libc::{c_int, c_void, pthread_attr_t, sched_param, sigset_t, size_t};

extern "C" {
    fn pthread_attr_getdetachstate(attr: *const pthread_attr_t, state: *mut c_int) -> c_int;
    fn pthread_attr_setdetachstate(attr: *mut pthread_attr_t, state: c_int) -> c_int;
    fn pthread_attr_getguardsize(attr: *const pthread_attr_t, size: *mut size_t) -> c_int;
    fn pthread_attr_setguardsize(attr: *mut pthread_attr_t, size: size_t) -> c_int;
    fn pthread_attr_getinheritsched(attr: *const pthread_attr_t, inherit: *mut c_int) -> c_int;
    fn pthread_attr_setinheritsched(attr: *mut pthread_attr_t, inherit: c_int) -> c_int;
    fn pthread_attr_getschedpolicy(attr: *const pthread_attr_t, policy: *mut c_int) -> c_int;
    fn pthread_attr_setschedpolicy(attr: *mut pthread_attr_t, policy: c_int) -> c_int;
    fn pthread_attr_getschedparam(attr: *const pthread_attr_t, p: *mut sched_param) -> c_int;
    fn pthread_attr_setschedparam(attr: *mut pthread_attr_t, p: *const sched_param) -> c_int;
    fn pthread_attr_getscope(attr: *const pthread_attr_t, scope: *mut c_int) -> c_int;
    fn pthread_attr_setscope(attr: *mut pthread_attr_t, scope: c_int) -> c_int;
    fn pthread_attr_getstackaddr(attr: *const pthread_attr_t, addr: *mut *mut c_void) -> c_int;
    fn pthread_attr_getstack(
        attr: *const pthread_attr_t,
        addr: *mut *mut c_void,
        size: *mut size_t,
    ) -> c_int;
    fn pthread_attr_setstack(attr: *mut pthread_attr_t, addr: *mut c_void, size: size_t) -> c_int;
    fn pthread_attr_getstacksize(attr: *const pthread_attr_t, size: *mut size_t) -> c_int;
    fn pthread_attr_setstacksize(attr: *mut pthread_attr_t, size: size_t) -> c_int;
    fn pthread_attr_getsigmask_np(attr: *const pthread_attr_t, mask: *mut sigset_t) -> c_int;
    fn pthread_attr_setsigmask_np(attr: *mut pthread_attr_t, mask: *const sigset_t) -> c_int;
    fn pthread_attr_getaffinity_np(
        attr: *const pthread_attr_t,
        size: size_t,
        set: *mut libc::cpu_set_t,
    ) -> c_int;
    fn pthread_getattr_default_np(attr: *mut pthread_attr_t) -> c_int;
}

/// An initialised attribute object, destroyed on drop.
pub struct Attr(MaybeUninit<pthread_attr_t>);

impl Attr {
    /// A pointer for pthread calls.
    pub fn as_ptr(&mut self) -> *mut pthread_attr_t {
        self.0.as_mut_ptr()
    }

    /// A copy of `src` (or of the process default when `src` is NULL) that asks for no CPU
    /// mask; made only for an attr that asks for one ([`requested`]), which glibc allocated.
    ///
    /// # Safety
    /// `src` must be NULL or an initialised attribute object.
    pub unsafe fn without_mask(src: *const pthread_attr_t) -> Option<Attr> {
        let mut a = Attr(MaybeUninit::uninit());
        let dst = a.as_ptr();
        if src.is_null() {
            let clear = real::pthread_attr_setaffinity_np()?;
            // SAFETY: dst is writable; getattr_default_np initialises it from the defaults,
            // and a NULL set of size 0 frees the mask it copied.
            if unsafe { pthread_getattr_default_np(dst) } != 0 {
                return None;
            }
            // SAFETY: dst was just initialised.
            if unsafe { clear(dst, 0, core::ptr::null()) } != 0 {
                return None;
            }
        } else {
            // SAFETY: dst is writable storage for an attr.
            if unsafe { libc::pthread_attr_init(dst) } != 0 {
                return None;
            }
            // SAFETY: src is an initialised attr (caller), dst was just initialised.
            unsafe { copy_fields(src, dst) };
        }
        Some(a)
    }
}

/// The CPU mask `attr` asks for (the process default's when `attr` is NULL), or `None` when it
/// asks for none.
///
/// # Safety
/// `attr` must be NULL or an initialised attribute object.
pub unsafe fn requested(attr: *const pthread_attr_t) -> Option<CpuSet> {
    if !attr.is_null() {
        // SAFETY: attr is initialised (caller).
        return unsafe { affinity_of(attr) };
    }
    let mut default = MaybeUninit::<pthread_attr_t>::uninit();
    // SAFETY: default is writable; it is destroyed below once initialised. glibc copies the
    // default's mask, if any, on the heap: a program that set one allocated for it itself.
    unsafe {
        if pthread_getattr_default_np(default.as_mut_ptr()) != 0 {
            return None;
        }
        let set = affinity_of(default.as_ptr());
        libc::pthread_attr_destroy(default.as_mut_ptr());
        set
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: an Attr is only built initialised.
        unsafe { libc::pthread_attr_destroy(self.as_ptr()) };
    }
}

/// The CPU mask in `attr`, or `None` when it sets none (glibc then reports all CPUs).
///
/// # Safety
/// `attr` must be an initialised attribute object.
pub unsafe fn affinity_of(attr: *const pthread_attr_t) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    let len = core::mem::size_of::<CpuSet>();
    // CpuSet is repr(C) in cpu_set_t layout; the pointer comes from a unique borrow.
    let ptr = &mut set as *mut CpuSet as *mut libc::cpu_set_t;
    // SAFETY: attr is initialised (caller); the set is len bytes of writable memory.
    let ok = unsafe { pthread_attr_getaffinity_np(attr, len, ptr) } == 0;
    (ok && set.count() < goset_plan::MAX_CPUS).then_some(set)
}

/// Copies every attribute except the CPU mask from `src` to `dst`.
///
/// # Safety
/// Both must be initialised attribute objects.
unsafe fn copy_fields(src: *const pthread_attr_t, dst: *mut pthread_attr_t) {
    let mut v: c_int = 0;
    let mut size: size_t = 0;
    // SAFETY: both attrs are initialised (caller); every out-pointer is a live local. A getter
    // that fails leaves dst at its default for that field.
    unsafe {
        if pthread_attr_getdetachstate(src, &mut v) == 0 {
            pthread_attr_setdetachstate(dst, v);
        }
        if pthread_attr_getguardsize(src, &mut size) == 0 {
            pthread_attr_setguardsize(dst, size);
        }
        if pthread_attr_getschedpolicy(src, &mut v) == 0 {
            pthread_attr_setschedpolicy(dst, v);
        }
        // Only a priority other than the default is set: glibc checks one against the
        // policy's range with two system calls, on every thread a program creates.
        let mut param: sched_param = core::mem::zeroed();
        let mut default: sched_param = core::mem::zeroed();
        if pthread_attr_getschedparam(src, &mut param) == 0
            && (pthread_attr_getschedparam(dst, &mut default) != 0
                || param.sched_priority != default.sched_priority)
        {
            pthread_attr_setschedparam(dst, &param);
        }
        if pthread_attr_getinheritsched(src, &mut v) == 0 {
            pthread_attr_setinheritsched(dst, v);
        }
        if pthread_attr_getscope(src, &mut v) == 0 {
            pthread_attr_setscope(dst, v);
        }
        // A caller-provided stack shows as a non-NULL stack address; otherwise only the size.
        let mut top: *mut c_void = core::ptr::null_mut();
        let mut base: *mut c_void = core::ptr::null_mut();
        if pthread_attr_getstackaddr(src, &mut top) == 0 && !top.is_null() {
            if pthread_attr_getstack(src, &mut base, &mut size) == 0 {
                pthread_attr_setstack(dst, base, size);
            }
        } else if pthread_attr_getstacksize(src, &mut size) == 0 {
            pthread_attr_setstacksize(dst, size);
        }
        // 0: a mask is set; PTHREAD_ATTR_NO_SIGMASK_NP (-1): none.
        let mut mask: sigset_t = core::mem::zeroed();
        if pthread_attr_getsigmask_np(src, &mut mask) == 0 {
            pthread_attr_setsigmask_np(dst, &mask);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_fields_and_leaves_the_source_alone() {
        let mut src = MaybeUninit::<pthread_attr_t>::uninit();
        // SAFETY: test-local attr objects, initialised before use and destroyed after.
        unsafe {
            let s = src.as_mut_ptr();
            assert_eq!(libc::pthread_attr_init(s), 0);
            pthread_attr_setdetachstate(s, libc::PTHREAD_CREATE_DETACHED);
            pthread_attr_setstacksize(s, 1 << 20);
            pthread_attr_setguardsize(s, 3 * 4096);
            let mut mask: sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGUSR1);
            pthread_attr_setsigmask_np(s, &mask);
            let one = CpuSet::single(0);
            let (ptr, len) = one.as_raw();
            assert_eq!(libc::pthread_attr_setaffinity_np(s, len, ptr.cast()), 0);
            assert_eq!(requested(s), Some(one));
            let mut copy = Attr::without_mask(s).unwrap();
            let d = copy.as_ptr();
            let (mut v, mut size) = (0, 0);
            pthread_attr_getdetachstate(d, &mut v);
            assert_eq!(v, libc::PTHREAD_CREATE_DETACHED);
            pthread_attr_getstacksize(d, &mut size);
            assert_eq!(size, 1 << 20);
            pthread_attr_getguardsize(d, &mut size);
            assert_eq!(size, 3 * 4096);
            let mut got: sigset_t = core::mem::zeroed();
            assert_eq!(pthread_attr_getsigmask_np(d, &mut got), 0);
            assert_eq!(libc::sigismember(&got, libc::SIGUSR1), 1);
            assert_eq!(affinity_of(d), None, "the copy asks for no mask");
            assert_eq!(
                affinity_of(s),
                Some(one),
                "the caller's attr must not change"
            );
            drop(copy);
            libc::pthread_attr_destroy(s);
        }
    }

    #[test]
    fn the_default_attr_asks_for_no_mask_and_copies_without_one() {
        // SAFETY: the process default, read and copied.
        unsafe {
            assert_eq!(requested(core::ptr::null()), None);
            let mut copy = Attr::without_mask(core::ptr::null()).unwrap();
            assert_eq!(affinity_of(copy.as_ptr()), None);
        }
    }

    #[test]
    fn copies_a_caller_stack() {
        let mut stack = vec![0u8; 1 << 18];
        let mut src = MaybeUninit::<pthread_attr_t>::uninit();
        // SAFETY: test-local attr; the stack outlives it.
        unsafe {
            let s = src.as_mut_ptr();
            libc::pthread_attr_init(s);
            pthread_attr_setstack(s, stack.as_mut_ptr().cast(), stack.len());
            let mut copy = Attr::without_mask(s).unwrap();
            let (mut base, mut size) = (core::ptr::null_mut(), 0);
            pthread_attr_getstack(copy.as_ptr(), &mut base, &mut size);
            assert_eq!(
                (base as usize, size),
                (stack.as_mut_ptr() as usize, stack.len())
            );
            libc::pthread_attr_destroy(s);
        }
    }
}
