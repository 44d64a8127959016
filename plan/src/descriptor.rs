//! Where the launcher and the shim keep the descriptors they hold inside a task (the slot
//! table and the log handed on, the shim's log): out of the low numbers a program expects
//! free, and always below the task's `RLIMIT_NOFILE`, whatever it is. One rule for both sides.
//! Allocation-free.

/// Lowest descriptor a kept file goes to when the limit allows: far above the numbers a
/// program gets back after closing inherited descriptors.
pub const HIGH: i64 = 512;

/// The lowest number to duplicate a kept descriptor at under a soft `RLIMIT_NOFILE` of `soft`:
/// [`HIGH`] when the limit is above it, else the upper half of what the limit allows
/// (`F_DUPFD` with a floor at or above the limit fails with EINVAL).
pub const fn floor(soft: u64) -> i64 {
    if soft > HIGH as u64 {
        HIGH
    } else {
        (soft / 2) as i64
    }
}

/// [`floor`] for this process's soft `RLIMIT_NOFILE` now; 0 when it cannot be read.
pub fn floor_now() -> i64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    floor(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_below_every_limit_and_high_when_it_can_be() {
        assert_eq!(floor(1 << 20), HIGH);
        assert_eq!(floor(513), HIGH);
        assert_eq!(floor(512), 256);
        assert_eq!(floor(16), 8);
        assert_eq!(floor(1), 0);
        assert_eq!(floor(0), 0);
        for soft in 1..2000u64 {
            assert!((floor(soft) as u64) < soft, "{soft}");
        }
    }
}
