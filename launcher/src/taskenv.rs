//! What goset-run adds to the environment the task inherits.
//!
//! Owns: the order of `LD_PRELOAD`, `GOSET_PLAN`, the thread-count variables set to the slot
//! count, and the one ASan option the shim's place in the library list needs. Pure: the
//! inherited values come in through a lookup, so tests feed them; `launch` applies the result.

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Thread-count variables set to the number of slots when unset or empty. Runtimes that would
/// size their pools from the affinity mask read it after the shim moved the main thread to its
/// one CPU (libomp without them; Go always: its runtime reads the mask with a raw system call
/// the shim cannot answer). OpenBLAS and MKL honour `OMP_NUM_THREADS`; their own variables
/// are left alone, since they would override a user's `OMP_NUM_THREADS`.
pub const THREAD_COUNT_VARS: [&str; 2] = ["OMP_NUM_THREADS", "GOMAXPROCS"];

/// The ASan flag that stops an ASan runtime from refusing to start when a preload comes
/// before it: the shim, in a program a shell (or any other process) started.
const ASAN_LINK_ORDER: &str = "verify_asan_link_order";

/// Where the shim is, when there is one.
#[derive(Debug, Clone, Copy)]
pub struct Shim<'a> {
    /// The shim's `LD_PRELOAD` entry.
    pub preload: &'a OsStr,
    /// The run directory, for `GOSET_PLAN`.
    pub plan_dir: &'a Path,
}

/// How many threads each process of the task is told to start.
#[derive(Debug, Clone, Copy)]
pub enum Threads {
    /// The slot count, where the user set no count of their own.
    Slots(usize),
    /// `--per-process`: this count for every process, whatever the user set.
    PerProcess(usize),
}

/// The variables to set for a task of `threads` threads; `inherited` looks a variable up in
/// the environment the task would otherwise get.
///
/// `LD_PRELOAD` keeps the user's entries first and ends with the shim, so that a library that
/// must come first (an ASan runtime the user preloads) still does, and the user's list means
/// what it meant without goset-run. When the shim is the only preload, `ASAN_OPTIONS` gets
/// `verify_asan_link_order=0` unless it says otherwise: ASan checks that its runtime comes
/// first and refuses to run when it does not; the shim defines no allocation function and
/// hands every call it wraps on to the next definition (ASan's interceptor, when there is
/// one), so ASan loses nothing behind it. With preloads of the user's own, the check stays,
/// as it would without goset-run.
pub fn task_env(
    inherited: impl Fn(&str) -> Option<OsString>,
    threads: Threads,
    shim: Option<Shim>,
) -> Vec<(OsString, OsString)> {
    let set = |name: &str| inherited(name).filter(|v| !v.is_empty());
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if let Some(shim) = shim {
        let user = set("LD_PRELOAD");
        env.push((
            "LD_PRELOAD".into(),
            preload_list(user.as_deref(), shim.preload),
        ));
        env.push((goset_plan::vars::PLAN.into(), shim.plan_dir.into()));
        if user.is_none() {
            if let Some(options) = asan_options(set("ASAN_OPTIONS").as_deref()) {
                env.push(("ASAN_OPTIONS".into(), options));
            }
        }
    }
    for name in THREAD_COUNT_VARS {
        match threads {
            Threads::Slots(n) if set(name).is_none() => {
                env.push((name.into(), n.to_string().into()))
            }
            Threads::PerProcess(n) => env.push((name.into(), n.to_string().into())),
            Threads::Slots(_) => {}
        }
    }
    env
}

/// The `LD_PRELOAD` value with `shim` last: the user's list (unset or empty: none) first, so
/// that a library that must come first still does (see [`task_env`]). goset-bench's `shim`
/// mode builds the same list by hand.
pub fn preload_list(user: Option<&OsStr>, shim: &OsStr) -> OsString {
    let mut preload = OsString::new();
    if let Some(user) = user.filter(|u| !u.is_empty()) {
        preload.push(user);
        preload.push(":");
    }
    preload.push(shim);
    preload
}

/// `options` with `verify_asan_link_order=0` added, or `None` when it already sets that flag.
/// ASan separates flags with `:`, `,` or white space.
fn asan_options(options: Option<&OsStr>) -> Option<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let flag = format!("{ASAN_LINK_ORDER}=0");
    let Some(options) = options else {
        return Some(flag.into());
    };
    let names_it = options
        .as_bytes()
        .split(|c| b":, \t\n\r".contains(c))
        .any(|f| f.split(|&c| c == b'=').next() == Some(ASAN_LINK_ORDER.as_bytes()));
    if names_it {
        return None;
    }
    let mut out = options.to_owned();
    out.push(":");
    out.push(flag);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env_of(inherited: &[(&str, &str)], shim: bool) -> BTreeMap<String, String> {
        let map: BTreeMap<String, OsString> = inherited
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let dir = Path::new("/run/goset/7");
        let shim = shim.then_some(Shim {
            preload: OsStr::new("/run/goset/7/lib/$PLATFORM/libgoset.so"),
            plan_dir: dir,
        });
        task_env(|k| map.get(k).cloned(), Threads::Slots(3), shim)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect()
    }

    #[test]
    fn thread_counts_are_set_only_when_unset_or_empty() {
        let env = env_of(&[], true);
        assert_eq!(env["OMP_NUM_THREADS"], "3");
        assert_eq!(env["GOMAXPROCS"], "3");
        let env = env_of(&[("OMP_NUM_THREADS", "1"), ("GOMAXPROCS", "")], false);
        assert!(!env.contains_key("OMP_NUM_THREADS"), "{env:?}");
        assert_eq!(env["GOMAXPROCS"], "3");
        assert!(!env.contains_key("OPENBLAS_NUM_THREADS"));
    }

    #[test]
    fn per_process_sets_the_thread_counts_whatever_the_user_set() {
        let inherited = |k: &str| (k == "OMP_NUM_THREADS").then(|| OsString::from("8"));
        let env: BTreeMap<OsString, OsString> = task_env(inherited, Threads::PerProcess(2), None)
            .into_iter()
            .collect();
        assert_eq!(env[OsStr::new("OMP_NUM_THREADS")], "2");
        assert_eq!(env[OsStr::new("GOMAXPROCS")], "2");
    }

    #[test]
    fn the_shim_comes_after_the_users_preloads() {
        let env = env_of(&[("LD_PRELOAD", "libasan.so.8 /opt/x.so")], true);
        assert_eq!(
            env["LD_PRELOAD"],
            "libasan.so.8 /opt/x.so:/run/goset/7/lib/$PLATFORM/libgoset.so"
        );
        assert_eq!(env["GOSET_PLAN"], "/run/goset/7");
        // The user's preloads keep ASan's check.
        assert!(!env.contains_key("ASAN_OPTIONS"), "{env:?}");
        let env = env_of(&[("LD_PRELOAD", "")], true);
        assert_eq!(env["LD_PRELOAD"], "/run/goset/7/lib/$PLATFORM/libgoset.so");
    }

    #[test]
    fn asan_may_follow_the_shim_unless_the_user_says_otherwise() {
        let asan = |options: &[(&str, &str)]| env_of(options, true).get("ASAN_OPTIONS").cloned();
        assert_eq!(asan(&[]).as_deref(), Some("verify_asan_link_order=0"));
        assert_eq!(
            asan(&[("ASAN_OPTIONS", "detect_leaks=0")]).as_deref(),
            Some("detect_leaks=0:verify_asan_link_order=0")
        );
        for own in [
            "verify_asan_link_order=1",
            "detect_leaks=0,verify_asan_link_order=true",
            "a=1 verify_asan_link_order=0",
        ] {
            assert_eq!(asan(&[("ASAN_OPTIONS", own)]), None, "{own}");
        }
        // A flag that only ends like it is another flag.
        assert_eq!(
            asan(&[("ASAN_OPTIONS", "no_verify_asan_link_order=1")]).as_deref(),
            Some("no_verify_asan_link_order=1:verify_asan_link_order=0")
        );
        // Without the shim nothing comes before ASan.
        assert!(!env_of(&[], false).contains_key("ASAN_OPTIONS"));
        assert!(!env_of(&[], false).contains_key("LD_PRELOAD"));
    }
}
