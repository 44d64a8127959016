//! Isolation on this machine, as root (CI): `--cgroup` (here the v1 cpuset of a hybrid host, or
//! v2 where the unified root offers cpuset), `--steer` with the machine's real IRQs, a real
//! irqbalance held for the run, `kill -9` of the launcher followed by `goset restore`, and the
//! sudo user. What is checked is read from `/proc` and `/sys` while the task runs, never from
//! goset's report. Without root each test says why it skips. Every test puts the IRQ
//! affinities back from its own snapshot and removes what a run left, even when it fails.

mod cgroup;
mod irqbalance;
mod machine;
mod privileges;
mod restore;
mod running;
mod signals;
mod steer;
