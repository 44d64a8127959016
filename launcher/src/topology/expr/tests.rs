//! Parsing and resolving on the machine of likwid's own examples: 4 cores with 2 threads each
//! on 2 sockets, CPU t*4+c being thread t of core c, so that the node domain is
//! `0,4,1,5,2,6,3,7`, `S0 = 0,4,1,5` and `S1 = 2,6,3,7` as in likwid-pin's documentation.
//! The fixtures of real machines are in `tests/expr_fixtures.rs`.

use super::*;

fn likwid_example() -> Topology {
    crate::topology::synthetic::machine(4, 2, 2)
}

fn resolve(text: &str) -> Result<Vec<usize>, String> {
    resolve_on(&likwid_example(), text)
}

fn resolve_on(topo: &Topology, text: &str) -> Result<Vec<usize>, String> {
    CpuExpr::parse(text)
        .and_then(|e| e.resolve(topo))
        .map_err(|e| e.to_string())
}

#[test]
fn plain_cpulists_are_taken_as_written_in_order() {
    assert_eq!(resolve("3,1,2-4").unwrap(), [3, 1, 2, 4]);
    assert_eq!(resolve("0-10:2").unwrap(), [0, 2, 4, 6, 8, 10]);
    assert_eq!(resolve("0-15:2/8").unwrap(), [0, 1, 8, 9]);
    assert_eq!(resolve("").unwrap(), Vec::<usize>::new());
    assert_eq!(resolve(" 40 ").unwrap(), [40], "the machine is not asked");
    assert_eq!(
        resolve("1-x").unwrap_err(),
        "expected a cpu list such as 0,2-4 or 0-10:2 (numbers, ranges, strides)"
    );
}

#[test]
fn logical_numbering_is_physical_cores_first_as_likwid_documents() {
    // likwid-pin(1): node domain 0,4,1,5,2,6,3,7, sorted physical cores first 0,1,...,7.
    assert_eq!(resolve("L:0").unwrap(), [0]);
    assert_eq!(resolve("L:0,4").unwrap(), [0, 4]);
    assert_eq!(resolve("L:1-3").unwrap(), [1, 2, 3]);
    assert_eq!(resolve("L:N:1,4-6").unwrap(), [1, 4, 5, 6]);
    assert_eq!(resolve("N:0-3").unwrap(), [0, 1, 2, 3]);
    assert_eq!(resolve("N:0-7:2").unwrap(), [0, 2, 4, 6]);
    // S1 = 2,6,3,7: cores 2 and 3 first.
    assert_eq!(resolve("S1:0-3").unwrap(), [2, 3, 6, 7]);
    assert_eq!(resolve("L:S1:1").unwrap(), [3]);
    assert_eq!(resolve("M1:0-1").unwrap(), [2, 3]);
    assert_eq!(resolve("C0:0-3").unwrap(), [0, 1, 4, 5]);
    assert_eq!(resolve("C1:2").unwrap(), [6]);
    assert_eq!(resolve("D1:0").unwrap(), [2], "one die per socket");
    assert_eq!(resolve("S1:3,0").unwrap(), [7, 2], "the order written");
}

#[test]
fn expressions_count_in_the_domains_core_by_core_order() {
    // likwid's examples on the node domain 0,4,1,5,2,6,3,7.
    assert_eq!(resolve("E:N:1").unwrap(), [0]);
    assert_eq!(resolve("E:N:2").unwrap(), [0, 4]);
    assert_eq!(resolve("E:N:2:1:2").unwrap(), [0, 1]);
    assert_eq!(resolve("E:N:4:2:4").unwrap(), [0, 4, 2, 6]);
    // One thread on each of the first four cores.
    assert_eq!(resolve("E:N:4:1:2").unwrap(), [0, 1, 2, 3]);
    assert_eq!(resolve("E:S1:2:1:2").unwrap(), [2, 3]);
    assert_eq!(resolve("E:S0:4").unwrap(), [0, 4, 1, 5]);
}

#[test]
fn at_joins_parts_in_order_and_a_cpu_counts_once() {
    assert_eq!(resolve("S0:0-1@S1:0-1").unwrap(), [0, 1, 2, 3]);
    assert_eq!(resolve("S1:0@0,2@E:N:2").unwrap(), [2, 0, 4]);
    assert_eq!(resolve("M1:0 @ 7").unwrap(), [2, 7]);
}

#[test]
fn domains_hold_only_the_cpus_goset_run_may_use() {
    let mut topo = likwid_example();
    // A cpuset without CPUs 0 and 4 (core 0): positions shift, as likwid numbers in a cpuset.
    for c in [0, 4] {
        topo.cpus[c].allowed = false;
    }
    assert_eq!(resolve_on(&topo, "N:0-2").unwrap(), [1, 2, 3]);
    assert_eq!(resolve_on(&topo, "S0:0-1").unwrap(), [1, 5]);
    topo.cpus[1].online = false;
    topo.cpus[5].online = false;
    assert_eq!(
        resolve_on(&topo, "S0:0").unwrap_err(),
        "S0: no socket 0 with CPUs goset-run may use (sockets: 1)"
    );
}

#[test]
fn bad_expressions_name_the_part_and_what_is_accepted() {
    let accepted = "expected a cpu list (0,2-4 or 0-10:2) or a likwid expression: \
         DOMAIN:INDICES with DOMAIN N, S<i>, D<i>, M<i> or C<i> (S0:0-3), L:DOMAIN:INDICES, or \
         E:DOMAIN:COUNT[:CHUNK:STRIDE] (E:S0:4:1:2), joined with @";
    for bad in [
        "X0:1",
        "S:1",
        "Sx:1",
        "S0",
        "S0:",
        "N",
        "E:S0",
        "E:X:1",
        "E:S0:4:1",
        "E:S0:a",
        "L:",
        "s0:1",
        "E:S0:4:1:2:3",
        "S99999999:0",
    ] {
        assert_eq!(
            resolve(bad).unwrap_err(),
            format!("'{bad}': {accepted}"),
            "{bad}"
        );
    }
    assert_eq!(
        resolve("0@").unwrap_err(),
        format!("'': {accepted}"),
        "an empty part"
    );
    assert_eq!(
        resolve("S0:0@Q").unwrap_err(),
        format!("'Q': {accepted}"),
        "the part at fault"
    );
    assert_eq!(
        resolve("S0:x").unwrap_err(),
        "'S0:x': the positions in the domain: expected a cpu list such as 0,2-4 or 0-10:2 \
         (numbers, ranges, strides)"
    );
    assert_eq!(
        resolve("S0:3-1").unwrap_err(),
        "'S0:3-1': the positions in the domain: a range must run upwards (A-B with A <= B) \
         with a stride above 0"
    );
    for (bad, why) in [
        ("E:N:0", "COUNT must be at least 1"),
        ("E:N:2:0:1", "CHUNK must be at least 1"),
        (
            "E:N:4:2:1",
            "STRIDE must be at least CHUNK, or chunks would overlap",
        ),
    ] {
        assert_eq!(
            resolve(bad).unwrap_err(),
            format!("'{bad}': {why} (E:DOMAIN:COUNT[:CHUNK:STRIDE])")
        );
    }
}

#[test]
fn a_domain_or_position_the_machine_lacks_is_named() {
    assert_eq!(
        resolve("S2:0").unwrap_err(),
        "S2: no socket 2 with CPUs goset-run may use (sockets: 0-1)"
    );
    assert_eq!(
        resolve("M5:0").unwrap_err(),
        "M5: no NUMA domain 5 with CPUs goset-run may use (NUMA domains: 0-1)"
    );
    assert_eq!(
        resolve("C2:0").unwrap_err(),
        "C2: no last-level cache 2 with CPUs goset-run may use (last-level caches: 0-1)"
    );
    assert_eq!(
        resolve("S0:1-4").unwrap_err(),
        "S0:4: S0 holds 4 CPUs goset-run may use (positions 0-3)"
    );
    assert_eq!(
        resolve("E:N:5:1:2").unwrap_err(),
        "N:8: N holds 8 CPUs goset-run may use (positions 0-7)"
    );
}

#[test]
fn without_cache_information_each_socket_is_one_cache() {
    let mut topo = likwid_example();
    for c in &mut topo.cpus {
        c.llc = None;
    }
    assert_eq!(resolve_on(&topo, "C1:0-1").unwrap(), [2, 3]);
}
