//! What the SPANK plugin hands the step agent: the agent's own arguments, the user's
//! `--goset=ARGS` split into goset-run flags, the flags a job may not give, and the report
//! patterns' Slurm placeholders.
//!
//! Owns: these rules, pure (no I/O), so that they are tested here. Must not: touch the
//! machine or the socket ([`super::serve`] does).

use std::ffi::OsString;

/// The agent's arguments, as `slurm/goset_spank.c` passes them.
#[derive(Debug, Default, PartialEq)]
pub(super) struct AgentArgs {
    /// Slurm's job id (`%j`).
    pub job: String,
    /// The step id (`%s`).
    pub step: String,
    /// How many of the step's tasks run on this node.
    pub tasks: usize,
    /// CPUs per task (`--cpus-per-task`, 1 with `--overcommit`): each task's `-n` unless ARGS
    /// give one.
    pub cpus_per_task: usize,
    /// The user's ARGS, as given.
    pub args: String,
    /// plugstack.conf's `allow_root_flags`.
    pub allow_root_flags: bool,
}

impl AgentArgs {
    /// Parses `--job J --step S --tasks K --cpus-per-task C --args ARGS
    /// [--allow-root-flags]`.
    pub fn parse(args: &[OsString]) -> Result<AgentArgs, String> {
        let mut out = AgentArgs::default();
        let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
        while let Some(flag) = it.next() {
            if flag == "--allow-root-flags" {
                out.allow_root_flags = true;
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("{flag}: a value is missing"))?;
            let number = || {
                value.parse::<usize>().map_err(|_| {
                    format!("{flag} '{value}': not a number (slurm/goset_spank.c passes it)")
                })
            };
            match flag.as_str() {
                "--job" => out.job = value.clone(),
                "--step" => out.step = value.clone(),
                "--tasks" => out.tasks = number()?,
                "--cpus-per-task" => out.cpus_per_task = number()?.max(1),
                "--args" => out.args = value.clone(),
                _ => return Err(format!("--slurm-step: unknown argument '{flag}'")),
            }
        }
        Ok(out)
    }
}

/// The user's ARGS as goset-run flags: pieces split at commas and blanks
/// (`--smt=pack,--cpu-kind=any`, `-n 2`), where a piece that does not start with `-` after a
/// `--flag=value` piece continues that value (`--include=1,3-5` stays one flag).
pub(super) fn split_args(args: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in args.split_whitespace() {
        let mut continues = false;
        for piece in word.split(',') {
            match out.last_mut() {
                Some(last) if continues && !piece.starts_with('-') => {
                    last.push(',');
                    last.push_str(piece);
                }
                _ if piece.is_empty() => continue,
                _ => out.push(piece.to_string()),
            }
            continues = out
                .last()
                .is_some_and(|l| l.starts_with('-') && l.contains('='));
        }
    }
    out
}

/// The flags that need root on the node: refused inside a job unless the site allows them.
const ROOT_FLAGS: [&str; 3] = ["--cgroup", "--steer", "--fence"];

/// Flags that mean nothing for a task Slurm starts: the agent sets the CPUs outside the
/// task's binding itself, and the task is started by Slurm, once.
const STEP_FLAGS: [&str; 3] = ["--exclude", "--instances", "--dry-run"];

/// The first flag of `args` a job may not give, with why; `None` when all may be given.
pub(super) fn refused(args: &[String], allow_root_flags: bool) -> Option<String> {
    let name = |a: &String| a.split('=').next().unwrap_or_default().to_string();
    for a in args.iter().map(name) {
        if ROOT_FLAGS.contains(&a.as_str()) && !allow_root_flags {
            return Some(format!(
                "--goset: {a} needs root on the node and is refused inside a job \
                 (a site allows it with allow_root_flags in plugstack.conf)"
            ));
        }
        if STEP_FLAGS.contains(&a.as_str()) {
            return Some(format!(
                "--goset: {a} has no meaning for a Slurm task (Slurm's binding gives its CPUs, \
                 and Slurm starts it): use srun's --cpu-bind, -n and --cpus-per-task"
            ));
        }
    }
    None
}

/// Whether `args` give the task CPU count (`-n N`, `-nN`, `--count N`, `--count=N`).
pub(super) fn gives_count(args: &[String]) -> bool {
    args.iter().any(|a| {
        a == "-n"
            || a == "--count"
            || a.starts_with("--count=")
            || (a.len() > 2 && a.starts_with("-n") && a[2..].bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The Slurm placeholders of a file pattern (`--json=goset-%j.%t.json`): `%j` job, `%s`
/// step, `%t` task (global id), `%N` node, `%%` a percent sign; any other `%x` stays.
pub(super) fn expand(pattern: &str, job: &str, step: &str, task: u32, node: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') => out.push_str(job),
            Some('s') => out.push_str(step),
            Some('t') => out.push_str(&task.to_string()),
            Some('N') => out.push_str(node),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_split_at_commas_and_blanks_keeping_lists_whole() {
        assert_eq!(
            split_args("--smt=pack,--cpu-kind=any"),
            ["--smt=pack", "--cpu-kind=any"]
        );
        assert_eq!(split_args("-n 2 --smt pack"), ["-n", "2", "--smt", "pack"]);
        assert_eq!(split_args("-n,2"), ["-n", "2"]);
        assert_eq!(
            split_args("--include=1,3-5,--sample=0"),
            ["--include=1,3-5", "--sample=0"]
        );
        assert!(split_args("").is_empty());
        assert_eq!(split_args(",,-q,"), ["-q"]);
    }

    #[test]
    fn root_flags_need_the_site_and_step_flags_are_refused() {
        let args = |s: &str| split_args(s);
        assert!(refused(&args("--cgroup"), false)
            .unwrap()
            .contains("allow_root_flags"));
        assert!(refused(&args("--steer=on"), false).is_some());
        assert_eq!(refused(&args("--cgroup,--fence"), true), None);
        assert!(refused(&args("--exclude=0"), true)
            .unwrap()
            .contains("--exclude"));
        assert_eq!(refused(&args("--smt=pack,-q"), false), None);
    }

    #[test]
    fn a_count_is_seen_in_every_spelling() {
        for given in ["-n 2", "-n2", "--count 3", "--count=3"] {
            assert!(gives_count(&split_args(given)), "{given}");
        }
        assert!(!gives_count(&split_args("--numa=0,--near=eth0")));
    }

    #[test]
    fn patterns_take_slurms_placeholders() {
        assert_eq!(
            expand("g-%j.%s.%t.%N.json", "12", "0", 3, "n1"),
            "g-12.0.3.n1.json"
        );
        assert_eq!(expand("100%%-%x%", "1", "2", 0, "n"), "100%-%x%");
    }

    #[test]
    fn agent_args_parse_and_name_what_is_wrong() {
        let os = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        let a = AgentArgs::parse(&os(
            "--job 7 --step 0 --tasks 2 --cpus-per-task 0 --args -q --allow-root-flags",
        ))
        .unwrap();
        assert_eq!((a.job.as_str(), a.tasks, a.cpus_per_task), ("7", 2, 1));
        assert!(a.allow_root_flags);
        assert_eq!(a.args, "-q");
        assert!(AgentArgs::parse(&os("--tasks x"))
            .unwrap_err()
            .contains("'x'"));
        assert!(AgentArgs::parse(&os("--bogus 1"))
            .unwrap_err()
            .contains("--bogus"));
    }
}
