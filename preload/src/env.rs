//! A tiny `getenv` over the environment the shim was started with.
//!
//! Owns: the environment pointer handed to the `.init_array` constructor (which exists even
//! when `environ` is not yet set up), falling back to libc's `environ`; and [`put`], the one
//! entry the shim adds. Must not: allocate on the heap; the strings it returns live as long as
//! the process.

use core::sync::atomic::{AtomicPtr, Ordering};
use libc::c_char;

static ENVP: AtomicPtr<*const c_char> = AtomicPtr::new(core::ptr::null_mut());

extern "C" {
    static mut environ: *const *const c_char;
}

/// Remembers the environment given to the constructor.
pub fn set_envp(envp: *const *const c_char) {
    ENVP.store(envp as *mut _, Ordering::Release);
}

/// The value of `name`, without its `NAME=` prefix.
pub fn get(name: &[u8]) -> Option<&'static [u8]> {
    let mut envp = ENVP.load(Ordering::Acquire) as *const *const c_char;
    if envp.is_null() {
        envp = current();
    }
    // SAFETY: the constructor's envp or libc's environ: NULL or a NULL-terminated array of
    // strings that live as long as the process.
    unsafe { get_in(envp, name) }
}

/// libc's `environ` now (what `execv` and `execvp` hand on).
pub fn current() -> *const *const c_char {
    // SAFETY: reading libc's environ pointer; it is either NULL or a NULL-terminated array.
    unsafe { environ }
}

/// The value of `name` in `envp`, without its `NAME=` prefix.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings that outlive the result.
pub unsafe fn get_in<'a>(envp: *const *const c_char, name: &[u8]) -> Option<&'a [u8]> {
    if envp.is_null() {
        return None;
    }
    let mut i = 0;
    loop {
        // SAFETY: envp is a NULL-terminated array of pointers, so entry i is readable until the
        // terminator is met.
        let entry = unsafe { *envp.add(i) };
        if entry.is_null() {
            return None;
        }
        // SAFETY: every entry is a NUL-terminated C string that lives as long as the process.
        let bytes = unsafe { core::ffi::CStr::from_ptr(entry) }.to_bytes();
        if bytes.len() > name.len() && bytes.starts_with(name) && bytes[name.len()] == b'=' {
            return Some(&bytes[name.len() + 1..]);
        }
        i += 1;
    }
}

/// Sets the variable of `entry` (`NAME=value`, NUL-terminated, static) in libc's `environ`,
/// replacing its entry or adding one, without the heap: `environ` becomes a copy of itself in
/// a private mapping. glibc's `setenv` copies such an array when it next adds a variable
/// rather than reallocating it. Only before `main` (from the constructor): no other thread
/// reads the environment then. Nothing changes when `entry` has no `=` or no mapping can be
/// had.
pub fn put(entry: &'static [u8]) {
    let Some(eq) = entry.iter().position(|&b| b == b'=') else {
        return;
    };
    if entry.last() != Some(&0) {
        return;
    }
    let old = current();
    let mut n = 0;
    // SAFETY: environ is NULL or a NULL-terminated array.
    while !old.is_null() && !unsafe { *old.add(n) }.is_null() {
        n += 1;
    }
    let size = (n + 2) * core::mem::size_of::<*const c_char>();
    let Some(addr) = crate::sys::map_zeroed(size) else {
        return;
    };
    let new = addr as *mut *const c_char;
    let mut len = 0;
    for i in 0..n {
        // SAFETY: i < n, entries of the old array; every entry is a NUL-terminated string.
        let e = unsafe { *old.add(i) };
        // SAFETY: as above.
        let bytes = unsafe { core::ffi::CStr::from_ptr(e) }.to_bytes();
        if bytes.len() > eq && bytes[..=eq] == entry[..=eq] {
            continue;
        }
        // SAFETY: len <= i < n + 2 cells of the mapping.
        unsafe { *new.add(len) = e };
        len += 1;
    }
    // SAFETY: len <= n: cells len and len + 1 are inside the mapping (zero-filled: the
    // terminator is already there).
    unsafe {
        *new.add(len) = entry.as_ptr().cast();
        environ = new;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_variables_in_environ() {
        assert!(super::get(b"PATH").is_some_and(|p| !p.is_empty()));
        assert_eq!(super::get(b"GOSET_SURELY_UNSET_VARIABLE"), None);
        assert_eq!(super::get(b"PAT"), None);
    }
}
