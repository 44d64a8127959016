//! A fixed-size CPU bit set with the layout of glibc's `cpu_set_t` (1024 CPUs).

// `from_raw` and `as_raw` rely on the kernel's mask words being 64 bits wide.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("goset supports 64-bit Linux only");

/// Highest CPU count a [`CpuSet`] holds; equal to glibc's `CPU_SETSIZE`.
pub const MAX_CPUS: usize = 1024;
const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU numbers below [`MAX_CPUS`], laid out like `cpu_set_t` so it can be handed to
/// `sched_setaffinity` directly. Copyable and allocation-free.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CpuSet {
    words: [u64; WORDS],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet { words: [0; WORDS] }
    }

    /// The set holding exactly `cpu` (empty when `cpu` is out of range).
    pub fn single(cpu: usize) -> Self {
        let mut set = CpuSet::new();
        set.insert(cpu);
        set
    }

    /// Adds `cpu`; returns false (and changes nothing) when it is out of range.
    pub fn insert(&mut self, cpu: usize) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        self.words[cpu / 64] |= 1 << (cpu % 64);
        true
    }

    /// Removes `cpu` if present.
    pub fn remove(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] &= !(1 << (cpu % 64));
        }
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Lowest CPU in the set.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// The CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w &= o;
        }
        out
    }

    /// The CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w |= o;
        }
        out
    }

    /// CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        // Word by word, so that a sparse set costs its words, not 1024 bit tests.
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            core::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    i * 64 + bit
                })
            })
        })
    }

    /// Builds a set from the first `len` bytes of a kernel affinity mask (as passed to
    /// `sched_setaffinity`); bytes beyond [`MAX_CPUS`] are ignored.
    ///
    /// # Safety
    /// `mask` must be valid for reads of `len` bytes.
    pub unsafe fn from_raw(mask: *const u8, len: usize) -> CpuSet {
        let mut set = CpuSet::new();
        let len = len.min(MAX_CPUS / 8);
        // The kernel's mask is an array of native-endian `unsigned long`s, 64-bit here, which
        // is exactly the layout of `words`: a byte copy keeps every bit in place.
        // SAFETY: the caller guarantees `len` readable bytes; `words` holds MAX_CPUS / 8 >= len.
        unsafe { core::ptr::copy_nonoverlapping(mask, set.words.as_mut_ptr().cast::<u8>(), len) };
        set
    }

    /// The set's 64-bit words, lowest CPUs first.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// A pointer to the set in `cpu_set_t` layout, with its size in bytes.
    pub fn as_raw(&self) -> (*const u8, usize) {
        (self.words.as_ptr() as *const u8, WORDS * 8)
    }
}

impl core::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a: CpuSet = [1, 3, 64, 1023].into_iter().collect();
        let b: CpuSet = [3, 64, 5].into_iter().collect();
        assert_eq!(a.count(), 4);
        assert!(!a.clone().insert(1024));
        assert_eq!(a.intersection(&b).iter().collect::<Vec<_>>(), vec![3, 64]);
        assert_eq!(a.union(&b).count(), 5);
        assert_eq!(a.first(), Some(1));
    }

    #[test]
    fn raw_round_trip_matches_cpu_set_t_layout() {
        let a: CpuSet = [0, 9, 130].into_iter().collect();
        let (ptr, len) = a.as_raw();
        assert_eq!(len, core::mem::size_of::<libc::cpu_set_t>());
        // SAFETY: ptr/len come from a live CpuSet.
        let b = unsafe { CpuSet::from_raw(ptr, len) };
        assert_eq!(a, b);
        let mut raw: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: raw is a valid cpu_set_t and 9 < CPU_SETSIZE.
        unsafe { libc::CPU_SET(9, &mut raw) };
        let c = unsafe { CpuSet::from_raw(&raw as *const _ as *const u8, 2) };
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![9]);
    }
}
