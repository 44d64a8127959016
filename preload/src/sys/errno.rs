//! Raw results: the kernel's error range, read as an errno.

/// A raw result in the kernel's `-4095..-1` error range, as a positive errno.
pub fn error_of(ret: i64) -> Option<i32> {
    (-4095..0).contains(&ret).then_some(-ret as i32)
}
