//! The JSON report's committed schema: a report with every field present, built from domain
//! values, against `launcher/tests/fixtures/report-schema/<REPORT_SCHEMA>.json`.

use super::record::KnownAndSeen;
use super::*;
use crate::housekeeper::outcome::ThreadOutcome;
use crate::housekeeper::outcome::{HousekeeperCost, MoveEvent, Telemetry, Totals};
use crate::isolate::{cgroup, irq, IsolationOutcome};
use crate::placement_log::ThreadPlacement;
use crate::select::ranks::RankBlock;
use crate::select::Selection;
use crate::summary::RunSummary;
use crate::task::{Ending, Usage};
use crate::topology::gpus::{Gpu, Nic};
use crate::topology::{Device, DeviceKind};
use std::collections::BTreeMap;

fn gpu() -> Gpu {
    Gpu {
        index: 1,
        bus_id: "0000:3b:00.0".into(),
        numa_node: Some(0),
        node: Some(0),
        nic: Some(Nic {
            name: "ib0".into(),
            bus_id: "0000:3c:00.0".into(),
            link: "PIX",
        }),
        sysfs: "/sys/devices/pci0000:3a/0000:3b:00.0".into(),
    }
}

fn selection() -> Selection {
    Selection {
        task_cpus: vec![2, 3],
        housekeeper_cpu: 1,
        housekeeper_shared: false,
        node: Some(0),
        fenced: vec![6],
        unfenced: vec![7],
        spares: vec![4],
        core_cost: BTreeMap::from([(2, 1.5), (3, 2.0)]),
        ranking: vec![2, 3],
        near: Some(Device {
            name: "gpu1".into(),
            kind: DeviceKind::Gpu,
            sysfs: "/sys/devices/pci0000:3a/0000:3b:00.0".into(),
            bus_id: "0000:3b:00.0".into(),
            node: Some(0),
            local_cpus: Some(vec![0, 1, 2, 3]),
        }),
        passed_over: vec![5],
        ranks: vec![RankBlock {
            rank: 0,
            gpu: gpu(),
            share: vec![2, 3, 4],
            cpus: vec![2, 3],
            widened: Some("node"),
        }],
        perf: BTreeMap::from([(2, 1000)]),
    }
}

fn thread() -> ThreadOutcome {
    ThreadOutcome {
        placement: ThreadPlacement {
            tid: 101,
            pid: 100,
            comm: "worker".into(),
            role: "worker".into(),
            slot: Some(1),
            cpu: Some(3),
            shared: false,
            roams: false,
            set_calls: 2,
            asked: Some("0-3".into()),
            exited: true,
            placed_by: "shim".into(),
        },
        seen_on: vec![3],
        migrations: Some(1),
        voluntary_ctxsw: Some(10),
        involuntary_ctxsw: Some(2),
        run_delay_s: Some(0.25),
        cpu_s: Some(1.5),
        drift: Some(false),
        polls: 7,
    }
}

fn cpu_row(cpu: Option<usize>) -> crate::housekeeper::cpu_sampler::CpuTelemetry {
    crate::housekeeper::cpu_sampler::CpuTelemetry {
        cpu,
        freq_min_khz: Some(1_000_000),
        freq_avg_khz: Some(2_000_000),
        freq_max_khz: Some(3_000_000),
        freq_samples: 4,
        throttle: Some(0),
        irq_steerable: Some(5),
        irq_nonsteerable: Some(6),
        softirq: Some(7),
        steal_pct: Some(0.5),
        rows: BTreeMap::from([("LOC".to_string(), 6)]),
    }
}

fn telemetry() -> Telemetry {
    Telemetry {
        interval_ms: 100,
        polls: 7,
        window_s: 0.75,
        cpus: vec![cpu_row(Some(2))],
        all: cpu_row(None),
        housekeeper: HousekeeperCost {
            cpu: 1,
            cpu_s: 0.01,
            cpu_pct: 1.25,
            placed: 1,
            moved: 1,
        },
        totals: Totals {
            threads: 2,
            migrations: Some(3),
            run_delay_s: Some(0.5),
            drift: 0,
            brief: 1,
        },
        moves: vec![MoveEvent {
            after_s: 0.5,
            tid: 101,
            pid: 100,
            comm: "worker".into(),
            from_cpu: Some(3),
            to_cpu: Some(4),
            reason: "slot 1 left cpu 3 for cpu 4".into(),
        }],
    }
}

fn isolation() -> IsolationOutcome {
    let mut steer = irq::Steering::default();
    steer.applied = 3;
    steer.refused = vec![(24, "EIO".into())];
    steer.already_off = 1;
    steer.remaining = 0;
    steer.drift = 0;
    IsolationOutcome {
        cgroup: Some(cgroup::Group {
            path: "/sys/fs/cgroup/goset/100".into(),
            version: cgroup::Version::V2,
            cpus: "2-3".into(),
            mems: "0".into(),
        }),
        steer: Some(steer),
        irqbalance: Some("paused".into()),
        undone: crate::isolate::undo::Undone {
            restored: 4,
            failed: vec!["irq 25: EBUSY".into()],
            outlived: vec![(200, "straggler".into())],
        },
    }
}

/// A report with every field present, as `--json` writes it.
fn full_report(sel: &SelectionReport) -> String {
    let booking = Booking {
        pid: 300,
        start: 12345,
        uid: 1000,
        command: "other".into(),
        slurm: Some("42.0.1".into()),
        cpus: vec![5],
        housekeeper_cpu: 1,
    };
    let error = ReadError {
        file: "/proc/interrupts".into(),
        reason: "missing".into(),
    };
    let mut report = Report::selected(sel, PlacementMode::Thread, &[booking], &[error]);
    report.run = Some(RunReport::from(&RunSummary::new(
        2.0,
        Ending::Signaled(9),
        Usage {
            user_s: 1.0,
            system_s: 0.5,
            max_rss_kib: 2048,
            minor_faults: 10,
            major_faults: 1,
            voluntary_ctxsw: 20,
            involuntary_ctxsw: 3,
        },
        true,
    )));
    report.threads = vec![ThreadReport::from(&thread())];
    report.processes = vec![ProcessReport {
        pid: 100,
        instance: Some(0),
        comm: "app".into(),
        threads: 2,
        cpus: vec![2, 3],
        nodes: vec![0],
        exit_code: Some(0),
        rank: Some(0),
        rank_var: Some("LOCAL_RANK"),
        gpu: Some("gpu1".into()),
        block: Some(vec![2, 3]),
    }];
    report.telemetry = Some(TelemetryReport::from(&telemetry()));
    report.isolation = Some(IsolationReport::from(&isolation()));
    report.noise_record = Some(RecordUse {
        informed: true,
        sample_ms: 250,
        cpus: vec![KnownAndSeen {
            cpu: 2,
            known_lost_pct: 0.5,
            known_covered_s: 60.0,
            seen_lost_pct: Some(0.25),
        }],
    });
    serde_json::to_string_pretty(&report).unwrap() + "\n"
}

/// A machine of CPUs 0-3, two to a core, each with all it can have.
fn machine() -> (crate::topology::Topology, crate::noise::Noise) {
    let cpus = (0..4)
        .map(|cpu| crate::topology::CpuInfo {
            cpu,
            online: true,
            allowed: true,
            siblings: vec![cpu & !1, cpu | 1],
            core: Some(cpu as i64 / 2),
            package: Some(0),
            node: Some(0),
            die: Some(0),
            cluster: None,
            llc: Some(0),
            l2: Some(cpu / 2),
            package_index: Some(0),
            present: true,
            isolated: true,
            nohz_full: true,
            rcu_nocbs: true,
            kind: Some(0),
            favour: None,
        })
        .collect();
    let topo = crate::topology::Topology {
        cpus,
        ..Default::default()
    };
    let noise = crate::noise::Noise {
        window_ms: 250,
        cpus: (0..4)
            .map(|cpu| {
                let n = crate::noise::CpuNoise {
                    irq_steerable: 1,
                    irq_nonsteerable: 2,
                    softirq: 3,
                    busy_pct: 4.5,
                    steal_pct: 0.5,
                    ..Default::default()
                };
                (cpu, n)
            })
            .collect(),
        errors: Vec::new(),
    };
    (topo, noise)
}

/// Every field's path (`threads[].cpu`) and its JSON types.
fn shape(v: &serde_json::Value, path: String, out: &mut BTreeMap<String, Vec<&'static str>>) {
    use serde_json::Value;
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(items) => {
            for item in items {
                shape(item, format!("{path}[]"), out);
            }
            "array"
        }
        Value::Object(fields) => {
            for (k, item) in fields {
                shape(item, format!("{path}.{k}"), out);
            }
            "object"
        }
    };
    let kinds = out.entry(path).or_default();
    if !kinds.contains(&kind) {
        kinds.push(kind);
        kinds.sort();
    }
}

#[test]
fn the_json_report_keeps_the_committed_schema_of_its_version() {
    let (topo, noise) = machine();
    let sel = selection_report(&topo, &noise, &selection());
    let report = full_report(&sel);
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/report-schema/{REPORT_SCHEMA}.json"));
    if std::env::var_os("GOSET_BLESS").is_some() {
        std::fs::write(&file, &report).unwrap();
    }
    let golden = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (GOSET_BLESS=1 writes it)", file.display()));
    let (mut want, mut got) = (BTreeMap::new(), BTreeMap::new());
    shape(
        &serde_json::from_str(&golden).unwrap(),
        String::new(),
        &mut want,
    );
    shape(
        &serde_json::from_str(&report).unwrap(),
        String::new(),
        &mut got,
    );
    let changed: Vec<String> = (want.keys().chain(got.keys()))
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| format!("{k}: {:?} -> {:?}", want.get(k), got.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "the report's fields changed under schema {REPORT_SCHEMA} ({}):\n{}\n\
         a removed, renamed or retyped field raises REPORT_SCHEMA and commits its own file \
         (GOSET_BLESS=1); see docs/report.md",
        file.display(),
        changed.join("\n")
    );
    // The same fields: the same text too (their order, the values this test gives them).
    assert_eq!(report, golden, "{} differs", file.display());
}
