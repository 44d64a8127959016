//! The record: decay and merge, the view, the blend, and records on disk that are not to be
//! believed (another owner, a link, huge, garbage, from the future, of another machine).

use super::blend;
use super::decay::*;
use super::feed;
use super::file::{self, Context};
use crate::noise::{CpuNoise, Noise, Score};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

fn obs(secs: f64, load: f64) -> Observation {
    Observation {
        secs,
        load_pct: Some(load),
        irq_pct: 0.5,
        softirq_pct: 1.0,
        events_per_s: 100.0,
        ..Observation::default()
    }
}

fn ctx(now: f64) -> Context {
    Context {
        machine: "m1".into(),
        cpus: 4,
        now,
    }
}

#[test]
fn an_average_does_not_depend_on_how_often_a_cpu_was_observed() {
    let mut r = Record::new("m1", 1000.0);
    for i in 0..60 {
        r.observe(0, 1000.0 + i as f64, &obs(1.0, 10.0));
    }
    r.observe(1, 1059.0, &obs(1.0, 10.0));
    let v = r.view(MINUTES, 1059.0);
    assert!((v[&0].load_pct - 10.0).abs() < 1e-9);
    assert!((v[&1].load_pct - 10.0).abs() < 1e-9);
    assert!((v[&0].lost_pct() - 11.5).abs() < 1e-9);
    assert!((v[&0].events_per_s - 100.0).abs() < 1e-9);
    // Sixty one-second observations cover nearly a minute of the 10-minute horizon.
    assert!((v[&0].covered_s - 57.2).abs() < 1.0, "{}", v[&0].covered_s);
    assert_eq!(v[&0].probe_pct, None);
}

#[test]
fn old_observations_fade_by_horizon() {
    let mut r = Record::new("m1", 0.0);
    for i in 0..100 {
        r.observe(0, i as f64, &obs(1.0, 50.0));
    }
    // Twenty minutes later, a quiet minute.
    for i in 0..60 {
        r.observe(0, 1300.0 + i as f64, &obs(1.0, 0.0));
    }
    let now = 1360.0;
    let secs = r.view(0, now)[&0].load_pct;
    let mins = r.view(MINUTES, now)[&0].load_pct;
    let day = r.view(2, now)[&0].load_pct;
    assert!(secs < 0.01, "the seconds horizon forgot: {secs}");
    assert!(
        mins > 1.0 && mins < 10.0,
        "the minutes horizon fades: {mins}"
    );
    assert!(
        (day - 50.0 * 100.0 / 160.0).abs() < 1.0,
        "the day keeps it: {day}"
    );
    // Coverage decays while nobody observes.
    let later = r.view(MINUTES, now + 600.0)[&0].covered_s;
    assert!((later / r.view(MINUTES, now)[&0].covered_s - (-1.0f64).exp()).abs() < 1e-9);
}

#[test]
fn merging_two_runs_views_keeps_the_average_and_adds_the_coverage() {
    let mut a = Record::new("m1", 100.0);
    let mut b = Record::new("m1", 100.0);
    for i in 0..30 {
        a.observe(0, 100.0 + i as f64, &obs(1.0, 20.0));
        b.observe(0, 110.0 + i as f64, &obs(1.0, 20.0));
        b.observe(1, 110.0 + i as f64, &obs(1.0, 0.0));
    }
    let (ca, cb) = (
        a.view(MINUTES, 139.0)[&0].covered_s,
        b.view(MINUTES, 139.0)[&0].covered_s,
    );
    let mut m = a.clone();
    m.merge(&b);
    let v = m.view(MINUTES, 139.0);
    assert!((v[&0].load_pct - 20.0).abs() < 1e-9);
    assert!((v[&0].covered_s - (ca + cb)).abs() < 1e-6);
    assert_eq!(v[&1].load_pct, 0.0);
    assert_eq!(m.updated, 139.0);
    assert_eq!(m.since, 100.0);
    // Merging in the other order gives the same record.
    let mut n = b.clone();
    n.merge(&a);
    let w = n.view(MINUTES, 139.0);
    assert!((w[&0].covered_s - v[&0].covered_s).abs() < 1e-6);
}

#[test]
fn the_task_s_own_cpus_leave_load_unobserved_and_probes_weigh_by_duration() {
    let mut r = Record::new("m1", 0.0);
    r.observe(0, 1.0, &obs(1.0, 30.0));
    r.observe(
        0,
        2.0,
        &Observation {
            load_pct: None,
            ..obs(1.0, 0.0)
        },
    );
    let v = r.view(MINUTES, 2.0)[&0];
    assert!((v.load_pct - 30.0).abs() < 0.1, "{}", v.load_pct);
    assert!(v.covered_s > 1.9);
    r.add_probe(0, 2.0, 0.10, 3.0);
    r.add_probe(0, 2.0, 0.02, 1.0);
    let p = r.view(MINUTES, 2.0)[&0].probe_pct.unwrap();
    assert!((p - 8.0).abs() < 1e-6, "10 % for 3 s and 2 % for 1 s: {p}");
    // Nonsense is left out.
    r.add_probe(0, 2.0, f64::NAN, 1.0);
    r.observe(0, 2.0, &obs(0.0, 100.0));
    r.observe(0, 2.0, &obs(1.0, f64::INFINITY));
    assert_eq!(r.view(MINUTES, 2.0)[&0].probe_pct, Some(p));
    r.observe(MAX_CPUS, 2.0, &obs(1.0, 1.0));
    assert!(!r.cpus.contains_key(&MAX_CPUS));
}

#[test]
fn check_refuses_foreign_future_and_out_of_range_records() {
    let mut r = Record::new("m1", 100.0);
    r.observe(1, 100.0, &obs(1.0, 5.0));
    assert_eq!(r.check("m1", 100.0, 4), Ok(()));
    assert!(r
        .check("m2", 100.0, 4)
        .unwrap_err()
        .contains("another machine"));
    assert!(r.check("m1", 0.0, 4).unwrap_err().contains("future"));
    assert!(r.check("m1", 100.0, 1).is_err(), "CPU 1 on a 1-CPU machine");
    let mut bad = r.clone();
    bad.cpus.get_mut(&1).unwrap()[0].load = 1e9;
    assert!(bad.check("m1", 100.0, 4).is_err());
    let mut bad = r.clone();
    bad.cpus.get_mut(&1).unwrap()[2].w = -1.0;
    assert!(bad.check("m1", 100.0, 4).is_err());
    let mut bad = r.clone();
    bad.version = 2;
    assert!(bad.check("m1", 100.0, 4).is_err());
}

fn write(dir: &std::path::Path, text: &[u8]) -> std::path::PathBuf {
    let p = dir.join(file::FILE);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

fn learned(now: f64) -> Record {
    let mut r = Record::new("m1", now - 60.0);
    for i in 0..60 {
        r.observe(1, now - 60.0 + i as f64, &obs(1.0, 12.0));
        r.observe(0, now - 60.0 + i as f64, &obs(1.0, 1.0));
    }
    r
}

#[test]
fn save_merges_under_the_lock_and_load_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("bookings");
    let now = 10_000.0;
    let (path, warnings) = file::save_in(&sub, &ctx(now), &learned(now)).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(path, sub.join(file::FILE));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    // A second save merges: the same average, twice the coverage.
    file::save_in(&sub, &ctx(now), &learned(now)).unwrap();
    let loaded = file::load_from(std::slice::from_ref(&sub), &ctx(now));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let (p, r) = loaded.record.unwrap();
    assert_eq!(p, path);
    let v = r.view(MINUTES, now);
    assert!((v[&1].load_pct - 12.0).abs() < 1e-6);
    assert!(v[&1].covered_s > 100.0, "{}", v[&1].covered_s);
    // No record: nothing, no warning.
    let empty = file::load_from(&[dir.path().join("none")], &ctx(now));
    assert!(empty.record.is_none() && empty.warnings.is_empty());
}

/// The warning `load_from` gives for the record in `dir`, which it must ignore.
fn ignored(dir: &std::path::Path, now: f64) -> String {
    let loaded = file::load_from(&[dir.to_path_buf()], &ctx(now));
    assert!(loaded.record.is_none(), "must be ignored");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    loaded.warnings[0].clone()
}

#[test]
fn hostile_records_are_ignored_with_one_warning() {
    let now = 10_000.0;
    let good = serde_json::to_vec(&learned(now)).unwrap();
    // Garbage.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), b"\x00\xffnot json at all");
    assert!(ignored(dir.path(), now).contains("not a record"));
    // Huge.
    let f = std::fs::File::create(dir.path().join(file::FILE)).unwrap();
    f.set_len(file::MAX_BYTES + 1).unwrap();
    assert!(ignored(dir.path(), now).contains("bytes"));
    // From the future.
    write(dir.path(), &good);
    assert!(ignored(dir.path(), now - 3600.0).contains("future"));
    // Of another machine.
    let other = file::load_from(
        &[dir.path().to_path_buf()],
        &Context {
            machine: "m2".into(),
            ..ctx(now)
        },
    );
    assert!(other.record.is_none() && other.warnings[0].contains("another machine"));
    // With more CPUs than this machine has.
    let small = file::load_from(
        &[dir.path().to_path_buf()],
        &Context {
            cpus: 1,
            ..ctx(now)
        },
    );
    assert!(small.record.is_none() && small.warnings[0].contains("CPU"));
    // Writable by others.
    std::fs::set_permissions(
        dir.path().join(file::FILE),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    assert!(ignored(dir.path(), now).contains("writable by others"));
    // A hard link to a good record.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = write(elsewhere.path(), &good);
    std::fs::remove_file(dir.path().join(file::FILE)).unwrap();
    std::fs::hard_link(&target, dir.path().join(file::FILE)).unwrap();
    assert!(ignored(dir.path(), now).contains("hard link"));
    std::fs::remove_file(dir.path().join(file::FILE)).unwrap();
    // A symbolic link to a good record.
    std::os::unix::fs::symlink(&target, dir.path().join(file::FILE)).unwrap();
    assert!(ignored(dir.path(), now).contains("symbolic link"));
    // A directory that is a link.
    let linked = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), linked.path().join("d")).unwrap();
    assert!(ignored(&linked.path().join("d"), now).contains("symbolic link"));
    // Saving over a bad record replaces it, and says so.
    let (_, warnings) = file::save_in(dir.path(), &ctx(now), &learned(now)).unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(file::load_from(&[dir.path().to_path_buf()], &ctx(now))
        .record
        .is_some());
}

#[test]
fn a_record_of_another_owner_is_ignored() {
    if crate::booking::euid() != 0 {
        eprintln!("skipped: needs root to make a file of another owner (CI runs as root)");
        return;
    }
    let now = 10_000.0;
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), &serde_json::to_vec(&learned(now)).unwrap());
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    assert!(ignored(dir.path(), now).contains("uid 65534"));
    // A directory of another user: neither read nor written.
    std::os::unix::fs::chown(&p, Some(0), Some(0)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    assert!(ignored(dir.path(), now).contains("uid 65534"));
    assert!(file::save_in(dir.path(), &ctx(now), &learned(now)).is_err());
    // Another user's world-writable directory without the sticky bit: refused too.
    std::os::unix::fs::chown(dir.path(), Some(0), Some(0)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(ignored(dir.path(), now).contains("sticky"));
}

fn cpu(busy: f64, irqs: u64) -> CpuNoise {
    CpuNoise {
        busy_pct: busy,
        irq_nonsteerable: irqs,
        ticks: 3,
        ..CpuNoise::default()
    }
}

fn sample(window_ms: u64, cpus: &[(usize, CpuNoise)]) -> Noise {
    Noise {
        window_ms,
        cpus: cpus.iter().cloned().collect(),
        errors: Vec::new(),
    }
}

fn load_of(score: Score) -> f64 {
    score.lost_pct()
}

#[test]
fn the_blend_keeps_periodic_noise_breaks_ties_and_lets_new_load_win() {
    let now = 10_000.0;
    let r = learned(now);
    let minutes = r.view(MINUTES, now);
    // A quiet 30 ms sample: CPU 1's 12 % (+1.5 % irq) from the record counts.
    let quiet = sample(30, &[(0, cpu(0.0, 3)), (1, cpu(0.0, 3))]);
    let b = blend::scores(&quiet, Some(&minutes), false);
    assert!(b.informed);
    assert_eq!(load_of(b.scores[&1]), 13.0);
    assert_eq!(load_of(b.scores[&0]), 2.0);
    assert_eq!(b.load_tie_pct, blend::RECORD_TIE_PCT);
    assert_eq!(b.window_ms, 1000, "rates compared as over a second");
    // A job that started a moment ago on CPU 0: the sample's 100 % outweighs the record.
    let busy = sample(30, &[(0, cpu(100.0, 3)), (1, cpu(0.0, 3))]);
    let b = blend::scores(&busy, Some(&minutes), false);
    assert_eq!(
        b.scores[&0].compare(&b.scores[&1]),
        std::cmp::Ordering::Greater
    );
    // An interrupt storm that just began shows; the record's rate stands otherwise.
    let storm = sample(30, &[(0, cpu(0.0, 3000)), (1, cpu(0.0, 3))]);
    let b = blend::scores(&storm, Some(&minutes), false);
    assert_eq!((b.scores[&0].rate, b.scores[&1].rate), (100_000.0, 100.0));
    // --sample 0: the record alone.
    let none = Noise::default();
    let b = blend::scores(&none, Some(&minutes), false);
    assert_eq!((load_of(b.scores[&0]), load_of(b.scores[&1])), (2.0, 13.0));
    // Recent for a quarter of an hour after its minute was watched, whatever the decay since.
    assert!(blend::recent(&r, now) && blend::recent(&r, now + 840.0));
    assert!(!blend::recent(&r, now + 1000.0));
    // Too little coverage, or no record: the sample alone, as without a record.
    let mut young = Record::new("m1", now);
    young.observe(1, now, &obs(5.0, 90.0));
    assert!(!blend::recent(&young, now));
    let b = blend::scores(&quiet, Some(&young.view(MINUTES, now)), false);
    assert!(!b.informed);
    assert_eq!(b, blend::scores(&quiet, None, false));
    assert_eq!(b.scores[&1], quiet.cpus[&1].score(false, 30));
    assert_eq!(b.load_tie_pct, crate::select::LOAD_TIE_PCT);
    let _: BTreeMap<usize, Score> = b.scores;
}

/// `/proc/stat` of two CPUs with these cumulative busy (user) ticks out of `total` each.
fn stat_text(busy: [u64; 2], total: u64) -> String {
    let mut s = format!(
        "cpu  {} 0 0 {}\n",
        busy[0] + busy[1],
        2 * total - busy[0] - busy[1]
    );
    for (c, b) in busy.iter().enumerate() {
        s.push_str(&format!("cpu{c} {b} 0 0 {}\n", total - b));
    }
    s
}

/// Ticks (10 ms) in `[from, to)` seconds that a source busy 0.5 s of every 5 s spends busy.
fn periodic_ticks(from: f64, to: f64) -> u64 {
    let mut busy = 0.0;
    let mut k = 0.0;
    while k * 5.0 < to {
        let (a, b) = (k * 5.0, k * 5.0 + 0.5);
        busy += (b.min(to) - a.max(from)).max(0.0);
        k += 1.0;
    }
    (busy * 100.0).round() as u64
}

/// The scenario with the counters made up and the selection real: CPU 1 busy 0.5 s
/// of every 5 s, both CPUs 3 % busy otherwise; 12 s of 1 s polls feed a record; then 8
/// launches at spread moments, each with a 250 ms sample. With the record every launch avoids
/// CPU 1; with the sample alone most land on it (the tie-break leaves CPU 0's core).
#[test]
fn a_periodic_source_learned_over_12_s_is_avoided_by_every_launch() {
    use crate::noise::{noise_between, Snapshot};
    use crate::select::{plan, Options};
    let base = std::time::Instant::now();
    let missing = |f: &str| {
        Err(crate::fsroot::ReadError {
            file: f.into(),
            reason: "missing".into(),
        })
    };
    let snap = |t: f64| {
        let ticks = (t * 100.0) as u64;
        let bg = (t * 3.0) as u64;
        let busy = [bg, bg + periodic_ticks(0.0, t)];
        Snapshot::from_texts(
            base + std::time::Duration::from_secs_f64(t),
            missing("/proc/interrupts"),
            missing("/proc/softirqs"),
            Ok(stat_text(busy, ticks)),
        )
    };
    let mut record = Record::new("m1", feed::unix_now());
    for i in 0..12 {
        let t = 0.3 + i as f64;
        super::feed::add(&mut record, &snap(t), &snap(t + 1.0), &[]);
    }
    let minutes = record.view(MINUTES, feed::unix_now());
    assert!(
        minutes[&1].lost_pct() > minutes[&0].lost_pct() + 5.0,
        "{minutes:?}"
    );
    let topo = crate::topology::synthetic::machine(2, 1, 1);
    let choose = |sample: &Noise, with_record: bool| {
        let b = blend::scores(sample, with_record.then_some(&minutes), false);
        let opts = Options {
            count: 1,
            sample_ms: b.window_ms,
            load_tie_pct: Some(b.load_tie_pct),
            ..Options::default()
        };
        plan(&topo, &b.scores, &opts).unwrap().task_cpus[0]
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for k in 0..8 {
        let t = 12.3 + 0.7 * k as f64;
        let sample = noise_between(&snap(t), &snap(t + 0.25));
        with.push(choose(&sample, true));
        without.push(choose(&sample, false));
    }
    assert_eq!(with, [0; 8], "with the record (sample alone: {without:?})");
    assert!(
        without.iter().filter(|&&c| c == 1).count() >= 5,
        "the sample alone misses the source: {without:?}"
    );
    // A job that started a moment ago on CPU 0 outweighs the record.
    let mut now_busy = noise_between(&snap(20.3), &snap(20.55));
    now_busy.cpus.get_mut(&0).unwrap().busy_pct = 100.0;
    assert_eq!(choose(&now_busy, true), 1);
}
