//! Tasks of several processes on this machine (the topologies with nodes and SMT are the VM
//! matrix's, `vm/`): `--per-process` under `mpirun` sizes each rank's OpenMP team to its
//! block and keeps the ranks apart; `--instances` starts the copies with their index, keeps
//! their output apart (a 300 MiB line relayed in bounded memory), reports a row each and
//! exits with the first failure; bad values are usage errors before anything starts.

use shim_tests::*;
use std::collections::BTreeMap;

/// Each process's OpenMP reports (pid -> reports), every thread on one CPU.
fn teams(reports: &[Report]) -> BTreeMap<u32, Vec<&Report>> {
    let mut by_pid: BTreeMap<u32, Vec<&Report>> = BTreeMap::new();
    for r in with_role(reports, "omp") {
        r.single_cpu();
        by_pid.entry(r.pid).or_default().push(r);
    }
    by_pid
}

#[test]
fn mpirun_ranks_size_their_teams_to_their_blocks() {
    let Some(omp) = Program::gomp("omp.c") else {
        return;
    };
    let has_mpirun = std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_mpirun {
        missing("mpirun", "apt-get install -y openmpi-bin");
        return;
    }
    let mut args: Vec<&str> = Vec::new();
    if is_root() {
        args.extend(["--allow-run-as-root", "--oversubscribe"]);
    }
    args.extend(["--bind-to", "none", "-np", "2", omp.path_str()]);
    let mpirun = std::path::PathBuf::from("mpirun");
    // Without --per-process each rank would start a team of -n (2) threads: 4 on 2 CPUs.
    let (outcome, selection) = run_under_goset(2, &["--per-process", "1"], &mpirun, &args, &[]);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let ranks = teams(&reports);
    assert_eq!(ranks.len(), 2, "two ranks\n{}", outcome.dump());
    let mut cpus: Vec<usize> = Vec::new();
    for team in ranks.values() {
        assert_eq!(team.len(), 1, "a team of one thread\n{}", outcome.dump());
        assert_eq!(team[0].field("team"), "1", "{}", team[0].line);
        cpus.push(team[0].single_cpu());
    }
    cpus.sort();
    let mut plan = selection.task_cpus.clone();
    plan.sort();
    assert_eq!(
        cpus,
        plan,
        "each rank on a CPU of its own\n{}",
        outcome.dump()
    );
}

#[test]
fn instances_get_their_index_their_own_cpus_and_a_row_each() {
    let Some(omp) = Program::gomp("omp.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    // Copy i exits with status i: the run's status is copy 1's, the first (only) failure.
    let script = format!(
        "echo index=$GOSET_INSTANCE; exec {} $GOSET_INSTANCE",
        omp.path_str()
    );
    let mut cmd = goset_run(2, &json, &["--instances", "2"], "sh");
    cmd.args(["-c", &script]);
    let outcome = {
        let _serial = launcher_lock();
        run(cmd)
    };
    outcome.expect_code(1);
    // Every line is a copy's, prefixed with its index; each copy saw its own index.
    let mut lines: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for line in outcome.stdout.lines() {
        let (index, rest) = (line.strip_prefix('['))
            .and_then(|l| l.split_once("] "))
            .unwrap_or_else(|| panic!("a line without its copy's index: {line:?}"));
        lines.entry(index.parse().unwrap()).or_default().push(rest);
    }
    assert_eq!(lines.len(), 2, "{}", outcome.dump());
    for (index, copy) in &lines {
        assert!(
            copy.contains(&format!("index={index}").as_str()),
            "copy {index}: {copy:?}"
        );
    }
    let stripped: Vec<String> = lines.values().flatten().map(|l| l.to_string()).collect();
    let reports: Vec<Report> = stripped.iter().filter_map(|l| parse_line(l)).collect();
    let copies = teams(&reports);
    assert_eq!(copies.len(), 2, "{}", outcome.dump());
    let cpus: Vec<usize> = copies.values().map(|t| t[0].single_cpu()).collect();
    assert_ne!(
        cpus[0],
        cpus[1],
        "the copies share a CPU\n{}",
        outcome.dump()
    );
    for team in copies.values() {
        assert_eq!(
            team[0].field("team"),
            "1",
            "N/K threads each: {}",
            team[0].line
        );
    }
    // The report: a row per copy, with its index, CPUs and exit status.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows: Vec<&serde_json::Value> = (report["processes"].as_array().unwrap().iter())
        .filter(|p| !p["instance"].is_null())
        .collect();
    assert_eq!(rows.len(), 2, "{report:#}");
    for row in rows {
        let index = row["instance"].as_u64().unwrap();
        assert_eq!(row["exit_code"], index, "{row}");
        assert_eq!(row["cpus"].as_array().unwrap().len(), 1, "{row}");
        assert_eq!(row["nodes"].as_array().unwrap().len(), 1, "{row}");
    }
    assert!(outcome.stderr.contains("Processes"), "{}", outcome.stderr);
}

#[test]
fn a_copy_writing_without_newlines_is_relayed_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    // 300 MiB in one line, under a 256 MiB address space: a relay that held the whole line to
    // prefix it could not. The NULs are dropped after goset-run, so only the prefixes and
    // the newline that ends the copy's last line come back.
    let copy = "if [ $GOSET_INSTANCE = 0 ]; then head -c 314572800 /dev/zero; else echo short; fi";
    let mut cmd = clean_command("bash");
    cmd.arg("-c")
        .arg("ulimit -v 262144 && timeout -k 1 60 \"$@\" | tr -d '\\000'; exit ${PIPESTATUS[0]}")
        .arg("bash");
    cmd.arg(goset_run_bin())
        .args(["-n", "2", "--sample", "0", "--json"])
        .arg(&json)
        .args(["--instances", "2", "--", "sh", "-c", copy]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    // Copy 0's prefix once, at a line's start; copy 1's line whole. Copy 1's line may fall
    // between two 64 KiB pieces of copy 0's endless one (docs/multi-process.md): when, is the
    // scheduler's choice.
    let out = &outcome.stdout;
    assert_eq!(out.matches("[0] ").count(), 1, "{}", outcome.dump());
    assert!(
        out.starts_with("[0] ") || out.contains("\n[0] "),
        "{}",
        outcome.dump()
    );
    assert_eq!(out.matches("[1] short\n").count(), 1, "{}", outcome.dump());
    assert_eq!(out.lines().count(), 2, "{}", outcome.dump());
}

#[test]
fn bad_instance_and_per_process_values_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    for (n, flags, names) in [
        (2, vec!["--instances", "0"], "--instances 0"),
        (2, vec!["--instances", "3"], "--instances 3"),
        (3, vec!["--instances", "2"], "does not split"),
        (2, vec!["--per-process", "0"], "--per-process 0"),
        (2, vec!["--per-process", "3"], "--per-process 3"),
        (2, vec!["--instances", "2", "--per-process", "2"], "2 x 2"),
    ] {
        let json = dir.path().join("report.json");
        let mut cmd = goset_run(n, &json, &flags, "touch");
        cmd.arg(&marker);
        let outcome = run(cmd);
        outcome.expect_code(2);
        let lines: Vec<&str> = outcome.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {}", outcome.stderr);
        assert!(lines[0].contains(names), "{flags:?}: {}", outcome.stderr);
        assert!(!marker.exists(), "{flags:?}: the task ran");
    }
}

#[test]
fn each_process_reads_its_block_as_its_affinity() {
    let Some(views) = Program::c("views.c") else {
        return;
    };
    let script = format!("{0} & {0} & wait", views.path_str());
    let (outcome, selection) = run_under_goset(
        2,
        &["--per-process", "1"],
        std::path::Path::new("sh"),
        &["-c", &script],
        &[],
    );
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let mains = with_role(&reports, "main");
    assert_eq!(mains.len(), 2, "{}", outcome.dump());
    // Without blocks each would read the task's two CPUs; each reads its block of one.
    let mut seen: Vec<usize> = mains
        .iter()
        .map(|m| {
            let view = cpulist(m.field("view"));
            assert_eq!(view.len(), 1, "a block of one: {}", m.line);
            view[0]
        })
        .collect();
    seen.sort();
    let mut plan = selection.task_cpus.clone();
    plan.sort();
    assert_eq!(seen, plan, "one block each\n{}", outcome.dump());
}
