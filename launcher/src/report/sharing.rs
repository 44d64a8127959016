//! Where CPUs are short: the CPUs a run shares with other runs' housekeepers, and its
//! housekeeper's CPU with their tasks (docs/slurm.md, "Housekeepers where CPUs are short").
//! Bookings keep task CPUs apart, not housekeepers, so both runs' reports say so.
//!
//! Owns: finding those CPUs in the bookings and rendering them. Must not: read the registry.

use super::model::BookingReport;

/// One CPU this run shares with another run.
#[derive(Debug, PartialEq)]
pub struct Shared {
    pub cpu: usize,
    /// This run's housekeeper CPU (a task CPU of the other run); else one of this run's task
    /// CPUs (the other run's housekeeper CPU).
    pub housekeeper_here: bool,
    /// The other run, as [`BookingReport::who`] names it.
    pub who: String,
}

/// The CPUs a run of `task_cpus` and `housekeeper` shares with `others`, each run once.
pub fn find(task_cpus: &[usize], housekeeper: usize, others: &[BookingReport]) -> Vec<Shared> {
    let mut out: Vec<Shared> = Vec::new();
    let mut seen: Vec<(u32, u64)> = Vec::new();
    for b in others {
        if seen.contains(&(b.pid, b.start)) {
            continue;
        }
        seen.push((b.pid, b.start));
        if task_cpus.contains(&b.housekeeper) {
            out.push(Shared {
                cpu: b.housekeeper,
                housekeeper_here: false,
                who: b.who(),
            });
        }
        if b.cpus.contains(&housekeeper) {
            out.push(Shared {
                cpu: housekeeper,
                housekeeper_here: true,
                who: b.who(),
            });
        }
    }
    out
}

impl Shared {
    /// `cpu 1: this run's housekeeper, a task CPU of pid 12 (./app)`.
    pub fn phrase(&self) -> String {
        if self.housekeeper_here {
            format!(
                "cpu {}: this run's housekeeper, a task CPU of {}",
                self.cpu, self.who
            )
        } else {
            format!(
                "cpu {}: a task CPU here, the housekeeper of {}",
                self.cpu, self.who
            )
        }
    }
}

/// The lines under the bookings: empty when nothing is shared.
pub fn render(shared: &[Shared]) -> String {
    if shared.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "Shared with other runs (CPUs short: bookings keep task CPUs apart, not housekeepers)\n",
    );
    for s in shared {
        out.push_str(&format!("  {}\n", s.phrase()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booking(pid: u32, cpus: &[usize], housekeeper: usize) -> BookingReport {
        BookingReport {
            pid,
            start: 1,
            uid: 0,
            command: "./app".into(),
            slurm: None,
            cpus: cpus.to_vec(),
            housekeeper,
        }
    }

    #[test]
    fn each_side_of_a_shared_housekeeper_is_found_once() {
        let others = [
            booking(7, &[1], 0),
            booking(8, &[3], 2),
            booking(7, &[1], 0),
        ];
        let shared = find(&[0, 2], 1, &others);
        assert_eq!(shared.len(), 3, "{shared:?}");
        assert_eq!(
            shared[0].phrase(),
            "cpu 0: a task CPU here, the housekeeper of pid 7 (./app)"
        );
        assert_eq!(
            shared[1].phrase(),
            "cpu 1: this run's housekeeper, a task CPU of pid 7 (./app)"
        );
        assert!(!shared[2].housekeeper_here && shared[2].cpu == 2);
        assert!(render(&shared).starts_with("Shared with other runs"));
        assert_eq!(find(&[5], 6, &others), []);
        assert_eq!(render(&[]), "");
    }
}
