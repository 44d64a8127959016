//! The placer's kernel calls: setting and reading a thread's affinity mask by tid.
//!
//! Owns: [`Affinity`], the one seam between the placer and `sched_setaffinity` /
//! `sched_getaffinity`, and [`Kernel`], which makes the calls. Must not: decide anything, or
//! remember a mask (the placer's view of a thread is the kernel's, read afresh). Tests give the
//! placer a fake that records masks, so they run on a machine of any number of CPUs.

use crate::housekeeper::policy::claims::Mask;
use goset_plan::CpuSet;

/// Sets and reads a thread's affinity mask.
pub trait Affinity {
    /// Sets thread `tid`'s mask to `set`; the error is the kernel's (`ESRCH`: the thread is
    /// gone).
    fn set(&self, tid: i32, set: &CpuSet) -> std::io::Result<()>;
    /// Thread `tid`'s mask; [`Mask::Unknown`] when it cannot be read (gone, or not ours).
    fn get(&self, tid: i32) -> Mask;
}

/// The kernel's affinity calls.
pub struct Kernel;

impl Affinity for Kernel {
    fn set(&self, tid: i32, set: &CpuSet) -> std::io::Result<()> {
        let (mask, len) = set.as_raw();
        // SAFETY: mask points into `set`, alive until the call returns, `len` bytes long.
        let rc = unsafe { libc::sched_setaffinity(tid, len, mask as *const libc::cpu_set_t) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    fn get(&self, tid: i32) -> Mask {
        match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)) {
            Ok(set) => Mask::Cpus(
                (0..nix::sched::CpuSet::count())
                    .filter(|&c| set.is_set(c).unwrap_or(false))
                    .collect(),
            ),
            // Gone or not ours: nothing to place.
            Err(_) => Mask::Unknown,
        }
    }
}

/// A stand-in for the kernel in tests: each thread's mask as last set, shared between the
/// placer and the test that reads it.
#[cfg(test)]
#[derive(Clone, Default)]
pub struct Fake {
    masks: std::rc::Rc<std::cell::RefCell<std::collections::BTreeMap<i32, Vec<usize>>>>,
    /// Masks given right after the next read of a thread's (see [`Fake::put_after_read`]).
    after_read: std::rc::Rc<std::cell::RefCell<std::collections::BTreeMap<i32, Vec<usize>>>>,
}

#[cfg(test)]
impl Fake {
    /// Gives thread `tid` the mask `cpus`, as the program or another tool would.
    pub fn put(&self, tid: i32, cpus: &[usize]) {
        self.masks.borrow_mut().insert(tid, cpus.to_vec());
    }

    /// Gives thread `tid` the mask `cpus` right after the next read of its mask, as the shim
    /// placing it between the housekeeper's read and its pin would.
    pub fn put_after_read(&self, tid: i32, cpus: &[usize]) {
        self.after_read.borrow_mut().insert(tid, cpus.to_vec());
    }
}

#[cfg(test)]
impl Affinity for Fake {
    /// Records the mask; an empty one (CPUs out of range) fails as the kernel's does.
    fn set(&self, tid: i32, set: &CpuSet) -> std::io::Result<()> {
        if set.is_empty() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.put(tid, &set.iter().collect::<Vec<_>>());
        Ok(())
    }

    /// The mask last set; [`Mask::Unknown`] for a thread never given one (as for a gone one).
    fn get(&self, tid: i32) -> Mask {
        let mask = (self.masks.borrow().get(&tid).cloned()).map_or(Mask::Unknown, Mask::Cpus);
        if let Some(cpus) = self.after_read.borrow_mut().remove(&tid) {
            self.put(tid, &cpus);
        }
        mask
    }
}
