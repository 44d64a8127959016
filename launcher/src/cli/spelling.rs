//! The Go goset's spellings: options with one dash (`-include 1,2`) and flags written
//! `-flag=true` / `-flag=false`, rewritten into clap's before parsing.
//!
//! It owns the lists of options the Go goset spelled that way and the rewriting. It does not
//! parse or check values: a value keeps its text as written, for clap and [`super::options`].

use std::ffi::OsString;

/// Options with a value that the Go goset spelled with one dash (`-include 1,2`); the flags in
/// [`BOOLEAN`] are accepted with one dash too.
const SINGLE_DASH_VALUED: &[&str] = &[
    "include", "exclude", "numa", "interval", "sample", "smt", "json", "log", "skip", "fsroot",
    "wait",
];

/// Flags without a value, which the Go goset also wrote `-flag=true` / `-flag=false`.
const BOOLEAN: &[&str] = &[
    "dry-run",
    "quiet",
    "main-on-housekeeper",
    "die-with-launcher",
    "help",
    "version",
    "cgroup",
    "steer",
    "fence",
    "keep-root",
    "share",
    "no-adapt",
    "adapt",
];

/// Rewrites the Go goset's spellings into clap's: `-include X` → `--include X`, and for flags
/// without a value `-quiet=true` → `--quiet`, `-quiet=false` → dropped. Arguments after `--`
/// are untouched; a value option keeps its value as written (`--json=false` names a file).
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    for arg in args.iter_mut().take_while(|a| *a != "--") {
        if arg == "-rm-cgroup" || arg == "--rm-cgroup" {
            *arg = "rm-cgroup".into();
        }
    }
    normalize_go_spellings(args, SINGLE_DASH_VALUED, BOOLEAN)
}

/// The rewriting of [`normalize_args`] for any program: options named in `valued` (they take a
/// value) or `boolean` (flags) are accepted with one dash too, and a flag as `-name=true` or
/// `-name=false`. The first argument (the program) and everything after `--` are untouched.
pub fn normalize_go_spellings(
    args: impl IntoIterator<Item = OsString>,
    valued: &[&str],
    boolean: &[&str],
) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut passthrough = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || passthrough {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        let long = text.strip_prefix("--").or_else(|| {
            let rest = text.strip_prefix('-')?;
            let name = rest.split('=').next()?;
            (valued.contains(&name) || boolean.contains(&name)).then_some(rest)
        });
        let Some(long) = long else {
            out.push(arg);
            continue;
        };
        match long.split_once('=') {
            Some((name, "true")) if boolean.contains(&name) => out.push(format!("--{name}").into()),
            Some((name, "false")) if boolean.contains(&name) => {}
            Some((name, value)) => out.push(format!("--{name}={value}").into()),
            None => out.push(format!("--{long}").into()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        normalize_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn accepts_go_spellings() {
        assert_eq!(
            norm(&[
                "goset",
                "-n",
                "2",
                "-include",
                "1,3",
                "-numa=-1",
                "-dry-run=true",
                "-die-with-launcher",
                "--",
                "-include"
            ]),
            [
                "goset",
                "-n",
                "2",
                "--include",
                "1,3",
                "--numa=-1",
                "--dry-run",
                "--die-with-launcher",
                "--",
                "-include"
            ]
        );
        assert_eq!(norm(&["goset", "-quiet=false", "-x"]), ["goset", "-x"]);
        assert_eq!(
            norm(&["goset", "-rm-cgroup", "goset-a", "-cgroup=true"]),
            ["goset", "rm-cgroup", "goset-a", "--cgroup"]
        );
        assert_eq!(
            norm(&["goset", "--json=false", "-json="]),
            ["goset", "--json=false", "--json="]
        );
    }
}
