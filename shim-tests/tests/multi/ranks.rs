//! Local ranks near their GPUs, by hand (`GOSET_CPUS` and `GOSET_RANK_BLOCKS`, the plan's
//! `rank_blocks` as `goset-run --near gpu:local-rank` writes it): a launcher forks workers
//! with `LOCAL_RANK`; each worker's threads, the one its constructor starts before `main`
//! included, are born on its GPU's block, whatever order the workers start in. The same
//! through goset-run with a device standing in for a GPU is the VM test's.

use shim_tests::*;

/// Two CPUs `(a, b)` as blocks of GPUs 0 and 1; `None` (with a note) on one CPU.
fn two_blocks() -> Option<(usize, usize)> {
    match own_allowed()[..] {
        [a, b, ..] => Some((a, b)),
        _ => {
            skip_note("needs two CPUs");
            None
        }
    }
}

fn by_hand_ranks(a: usize, b: usize, script: &str) -> Outcome {
    let mut cmd = by_hand("sh", &format!("{a},{b}"));
    cmd.env("GOSET_RANK_BLOCKS", format!("0:{a};1:{b}"))
        .env_remove("CUDA_VISIBLE_DEVICES")
        .args(["-c", script]);
    run(cmd)
}

#[test]
fn each_rank_threads_are_born_on_its_gpus_block_before_main() {
    let (Some(prog), Some((a, b))) = (Program::c("rank_worker.c"), two_blocks()) else {
        return;
    };
    let p = prog.path_str();
    // Rank 1 starts first: the block is its GPU's, not the first free one.
    let outcome = by_hand_ranks(
        a,
        b,
        &format!("LOCAL_RANK=1 {p} & sleep 0.1; LOCAL_RANK=0 {p} & wait"),
    );
    outcome.expect_code(0);
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        6,
        "two ranks of three threads\n{}",
        outcome.dump()
    );
    for r in &reports {
        let block = if r.field("rank") == "0" { a } else { b };
        assert_eq!(
            r.allowed,
            [block],
            "{} thread of rank {} on its block\n{}",
            r.role,
            r.field("rank"),
            outcome.dump()
        );
    }
    assert_eq!(with_role(&reports, "early").len(), 2);
}

#[test]
fn every_local_rank_variable_and_the_visible_list_name_the_gpu() {
    let (Some(prog), Some((a, b))) = (Program::c("rank_worker.c"), two_blocks()) else {
        return;
    };
    let p = prog.path_str();
    // Local rank 0 of a job that sees GPU 1 only drives GPU 1.
    let outcome = by_hand_ranks(a, b, &format!("CUDA_VISIBLE_DEVICES=1 LOCAL_RANK=0 {p}"));
    outcome.expect_code(0);
    for r in reports(&outcome) {
        assert_eq!(r.allowed, [b], "{}\n{}", r.role, outcome.dump());
    }
    // Every launcher's variable names the rank: Slurm's, Open MPI's, MPICH's, --instances'.
    for var in [
        "SLURM_LOCALID",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_LOCAL_RANK",
        "GOSET_INSTANCE",
    ] {
        let outcome = by_hand_ranks(a, b, &format!("{var}=1 {p}"));
        outcome.expect_code(0);
        for r in reports(&outcome) {
            assert_eq!(r.allowed, [b], "{var}: {}\n{}", r.role, outcome.dump());
        }
    }
    let uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
    let outcome = by_hand_ranks(
        a,
        b,
        &format!("CUDA_VISIBLE_DEVICES={uuid} LOCAL_RANK=0 {p}"),
    );
    outcome.expect_code(0);
    let warning = assert_one_warning(&outcome);
    assert!(warning.contains("GPU UUID or MIG name"), "{warning}");
    assert_eq!(reports(&outcome).len(), 3);
}

#[test]
fn each_ranks_log_record_names_its_rank_and_the_processes_report_reads_it() {
    use goset::housekeeper::outcome::ThreadOutcome;
    use goset::placement_log;
    use goset::report::model::ThreadReport;
    let (Some(prog), Some((a, b))) = (Program::c("rank_worker.c"), two_blocks()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("place.log");
    let p = prog.path_str();
    let mut cmd = by_hand("sh", &format!("{a},{b}"));
    cmd.env("GOSET_RANK_BLOCKS", format!("0:{a};1:{b}"))
        .env("GOSET_LOG", &log_path)
        .env_remove("CUDA_VISIBLE_DEVICES");
    for var in goset_plan::ranks::LOCAL_RANK_VARS {
        cmd.env_remove(var);
    }
    // Rank 1 by torchrun's variable, rank 0 by Slurm's.
    cmd.args([
        "-c",
        &format!("LOCAL_RANK=1 {p} & sleep 0.1; SLURM_LOCALID=0 {p} & wait"),
    ]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    // The worker's pid, by the block its threads were born on.
    let pid_on = |cpu: usize| {
        let r = reports(&outcome);
        let on = r.iter().find(|r| r.allowed == [cpu]);
        on.unwrap_or_else(|| panic!("no worker on {cpu}\n{}", outcome.dump()))
            .pid as i32
    };
    let (rank0, rank1) = (pid_on(a), pid_on(b));
    // The launcher's reader and Processes report over the shim's log.
    let log = placement_log::read(&log_path, placement_log::MAX_BYTES);
    let threads: Vec<ThreadReport> = (log.threads().into_iter())
        .map(|p| ThreadReport::from(&ThreadOutcome::unmeasured(p)))
        .collect();
    let mut processes = goset::report::processes::build(&threads, &[], |_| None);
    goset::report::processes::assign_ranks(&mut processes, &[], &log.ranks(2));
    let json = serde_json::to_value(&processes).unwrap();
    let of = |pid: i32| {
        let rows = json.as_array().unwrap();
        let row = rows.iter().find(|p| p["pid"] == pid);
        row.unwrap_or_else(|| panic!("no process {pid}: {json}"))
            .clone()
    };
    for (pid, rank, var) in [(rank0, 0, "SLURM_LOCALID"), (rank1, 1, "LOCAL_RANK")] {
        let row = of(pid);
        assert_eq!(row["rank"], rank, "{row}\n{}", outcome.dump());
        assert_eq!(row["rank_var"], var, "{row}");
        assert_eq!(row["gpu"], format!("gpu{rank}"), "{row}");
    }
    // The shell that started them is no rank: no record, no rank.
    let ranked = (json.as_array().unwrap().iter())
        .filter(|p| p.get("rank").is_some())
        .count();
    assert_eq!(ranked, 2, "{json}");
}
