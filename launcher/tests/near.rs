//! `--near DEVICE`: the device found in sysfs and its locality, on the made-up GPU server of
//! `tests/fixtures/topology/fake-2gpu-2node` (see its `make.sh`), on a real machine's dump,
//! and on this machine's own network interfaces and block devices; then what `goset-run
//! --dry-run` makes of it.

mod common;

use goset::fsroot::FsRoot;
use goset::topology::{Device, DeviceError, DeviceKind};
use std::path::Path;
use std::process::Command;

const FAKE: &str = "fake-2gpu-2node";

fn find(fixture: &str, name: &str) -> Result<Device, DeviceError> {
    Device::find(&FsRoot::new(common::fixture_root(fixture)), name)
}

/// `(kind, bus id, node, local cpus)` of the device `name` on the fake server.
fn place(name: &str) -> (DeviceKind, String, Option<usize>, Option<Vec<usize>>) {
    let d = find(FAKE, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(d.name, name);
    assert!(d.sysfs.ends_with(&d.bus_id), "{d:?}");
    (d.kind, d.bus_id, d.node, d.local_cpus)
}

#[test]
fn every_form_of_name_finds_its_device_and_node() {
    let node0 = || (Some(0), Some(vec![0, 1, 4, 5]));
    let node1 = || (Some(1), Some(vec![2, 3, 6, 7]));
    let at = |(node, cpus): (Option<usize>, Option<Vec<usize>>), kind, bus: &str| {
        (kind, bus.to_string(), node, cpus)
    };
    // The BMC's display controller at 02:00.0 comes first on the bus but is no GPU.
    assert_eq!(place("gpu0"), at(node0(), DeviceKind::Gpu, "0000:3b:00.0"));
    assert_eq!(place("gpu1"), at(node1(), DeviceKind::Gpu, "0000:86:00.0"));
    assert_eq!(
        place("3b:00.0"),
        at(node0(), DeviceKind::Pci, "0000:3b:00.0")
    );
    assert_eq!(
        place("0000:AF:00.0"),
        at(node1(), DeviceKind::Pci, "0000:af:00.0")
    );
    assert_eq!(
        place("ens1f0"),
        at(node1(), DeviceKind::Net, "0000:af:00.0")
    );
    // The namespace's device is the controller nvme0, which has a node but no local CPUs:
    // the walk goes on to the PCI function.
    assert_eq!(
        place("nvme0n1"),
        at(node0(), DeviceKind::Block, "0000:5e:00.0")
    );
    assert_eq!(
        place("nvme0n1p1"),
        at(node0(), DeviceKind::Block, "0000:5e:00.0")
    );
    let eno1 = find(FAKE, "eno1").unwrap();
    assert_eq!((eno1.node, eno1.bus_id.as_str()), (None, "0000:00:1f.6"));
    assert!(!eno1.has_locality(&(0..8).collect::<Vec<_>>()));
    assert!(find(FAKE, "gpu1").unwrap().has_locality(&[0, 1]));
}

#[test]
fn a_name_of_nothing_or_of_a_virtual_device_is_refused() {
    assert_eq!(find(FAKE, "eth9"), Err(DeviceError::Unknown));
    assert_eq!(find(FAKE, "0000:3c:00.0"), Err(DeviceError::Unknown));
    assert_eq!(find(FAKE, "../../devices"), Err(DeviceError::Unknown));
    assert_eq!(find(FAKE, ".."), Err(DeviceError::Unknown));
    assert_eq!(
        find(FAKE, "lo"),
        Err(DeviceError::Virtual {
            class: "network interface"
        })
    );
    assert_eq!(
        find(FAKE, "loop0"),
        Err(DeviceError::Virtual {
            class: "block device"
        })
    );
    assert_eq!(
        find(FAKE, "gpu2").unwrap_err().to_string(),
        "no GPU 2: this machine has 2 (in PCI bus order: gpu0 0000:3b:00.0, gpu1 0000:86:00.0)"
    );
}

#[test]
fn a_real_dumps_nic_and_infiniband_card_are_on_their_node() {
    // hwloc-gather-topology keeps the PCI tree: two Xeons, every device on node 0.
    let xeon = "32intel64-2p8co2t+8ve";
    let node0: Vec<usize> = (0..8).chain(16..24).collect();
    let nic = find(xeon, "enp96s0f0").unwrap();
    assert_eq!(
        (nic.bus_id.as_str(), nic.node, nic.local_cpus.as_ref()),
        ("0000:60:00.0", Some(0), Some(&node0))
    );
    let hca = find(xeon, "1a:00.0").unwrap();
    assert_eq!((hca.kind, hca.node), (DeviceKind::Pci, Some(0)));
    // NEC's vector engines are coprocessors (class 0x0b40), not display devices.
    assert!(matches!(
        find(xeon, "gpu0"),
        Err(DeviceError::NoGpu { index: 0, .. })
    ));
}

/// Runs `goset-run --dry-run --sample 0 --fsroot ROOT ARGS --json -`.
fn dry_run(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(common::bin("goset-run"))
        .args(["--dry-run", "--sample", "0", "--json", "-", "--fsroot"])
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

fn report(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn cpus(report: &serde_json::Value) -> Vec<u64> {
    (report["selection"]["task_cpus"].as_array().unwrap().iter())
        .map(|c| c.as_u64().unwrap())
        .collect()
}

#[test]
fn goset_run_selects_near_the_device_and_binds_its_node() {
    let root = common::fixture_root(FAKE);
    let out = dry_run(&root, &["-n", "4", "--near", "gpu1"]);
    let r = report(&out);
    let mut task = cpus(&r);
    task.sort();
    assert_eq!(task, [2, 3, 6, 7]);
    assert_eq!(r["selection"]["node"], 1, "--near binds memory to its node");
    let auto = report(&dry_run(
        &root,
        &["-n", "2", "--near", "gpu0", "--numa", "auto"],
    ));
    assert_eq!(auto["selection"]["node"], 0, "and so does --numa auto");
    let near = &r["selection"]["near"];
    assert_eq!(
        (&near["name"], &near["kind"], &near["bus_id"], &near["node"]),
        (
            &"gpu1".into(),
            &"gpu".into(),
            &"0000:86:00.0".into(),
            &1.into()
        )
    );
    assert_eq!(near["local_cpus"], serde_json::json!([2, 3, 6, 7]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("  near gpu1: 0000:86:00.0, node 1, local cpus 2-3,6-7\n"),
        "{stderr}"
    );

    // --numa off keeps the CPUs near and binds no memory; likwid expressions combine.
    let r = report(&dry_run(
        &root,
        &["-n", "2", "--near", "ens1f0", "--numa", "off"],
    ));
    assert!(cpus(&r).iter().all(|c| [2, 3, 6, 7].contains(c)));
    assert_eq!(r["selection"]["node"], serde_json::Value::Null);
    let r = report(&dry_run(
        &root,
        &["-n", "2", "--near", "nvme0n1p1", "--include", "M0:1@E:S0:1"],
    ));
    assert_eq!(cpus(&r), [1, 0]);
    assert!(
        report(&dry_run(&root, &["-n", "1"]))["selection"]
            .get("near")
            .is_none(),
        "no near key without --near"
    );
}

#[test]
fn a_device_without_locality_is_a_warning_and_the_run_goes_on() {
    let out = dry_run(&common::fixture_root(FAKE), &["-n", "8", "--near", "eno1"]);
    let r = report(&out);
    assert_eq!(cpus(&r).len(), 8, "every CPU is near it");
    assert_eq!(
        r["selection"]["node"],
        serde_json::Value::Null,
        "no node to bind"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warnings,
        [
            "goset-run: warning: --near eno1: 0000:00:1f.6 has no NUMA node and every CPU is \
          local to it (a VM, or firmware that does not say): the CPUs are not restricted, and \
          memory is bound only as --numa says"
        ]
    );
}

#[test]
fn bad_near_requests_are_one_line_and_exit_2() {
    let root = common::fixture_root(FAKE);
    for (args, want) in [
        (&["--near", "eth9"][..], "goset-run: --near eth9: no such network interface, block device or PCI device; --near takes a network interface (/sys/class/net), a block device (/sys/class/block), a PCI address (0000:3b:00.0 or 3b:00.0) or gpuN (the N-th GPU in PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them)\n"),
        (&["--near", "lo"][..], "goset-run: --near lo: a virtual network interface (no device behind it in sysfs), near no CPU; --near takes a network interface (/sys/class/net), a block device (/sys/class/block), a PCI address (0000:3b:00.0 or 3b:00.0) or gpuN (the N-th GPU in PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them)\n"),
        (&["--near", "gpu1", "--numa", "0"][..], "goset-run: --numa 0 with --near gpu1: the device is on node 1; give --numa 1, auto or off\n"),
        (&["--near", "gpu0", "-n", "5"][..], "goset-run: --near gpu0: 4 candidate CPUs are local to it, fewer than -n 5\n"),
        (&["--near", "ens1f0", "--include", "0"][..], "goset-run: --include 0: not local to --near ens1f0\n"),
    ] {
        let out = dry_run(&root, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: no report");
    }
}

/// What sysfs itself says of class device `dir` (`/sys/class/net/eth0`), read with plain
/// file calls and not with goset's reader: `None` without a `device` link (for a partition,
/// its disk's); else the nearest device up from it under `/sys/devices` that has a
/// `local_cpulist`, with its name, node and CPUs (`Some(None)` where there is none, as on a
/// bus without PCI).
type Place = (String, Option<usize>, Vec<usize>);

fn sysfs_says(dir: &Path) -> Option<Option<Place>> {
    let disk = match dir.join("partition").exists() {
        true => std::fs::canonicalize(dir)
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf(),
        false => dir.to_path_buf(),
    };
    let mut at = std::fs::canonicalize(disk.join("device")).ok()?;
    while !at.join("local_cpulist").exists() {
        match at.parent() {
            Some(up) if up.starts_with("/sys/devices/") => at = up.to_path_buf(),
            _ => return Some(None),
        }
    }
    let read = |f: &str| std::fs::read_to_string(at.join(f)).unwrap_or_default();
    let node: Option<usize> = read("numa_node").trim().parse().ok();
    let cpus = goset::topology::parse_cpulist(read("local_cpulist").trim()).unwrap();
    let name = at.file_name().unwrap().to_str().unwrap().to_string();
    Some(Some((name, node, cpus)))
}

/// This machine's own devices, whatever it has (a VM's virtio NIC and disk, a server's
/// NVMe): every entry of `/sys/class/net` and `/sys/class/block` is looked up, and what
/// goset finds must be what [`sysfs_says`] read on its own, device for device. It cannot pass
/// by finding nothing: each device with hardware behind it must be found with the very bus
/// id, node and CPUs of its sysfs files, each without must be refused, and goset-run must warn
/// exactly when the node is -1 and every online CPU is local. Nor can it fail for lack of a
/// particular device: it names none.
#[test]
fn this_machines_devices_are_found_where_sysfs_says() {
    let online = goset::topology::parse_cpulist(
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .unwrap()
            .trim(),
    )
    .unwrap();
    let mut checked = Vec::new();
    for class in ["/sys/class/net", "/sys/class/block"] {
        for entry in std::fs::read_dir(class).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let found = Device::find(&FsRoot::default(), &name);
            let place = match sysfs_says(&entry.path()) {
                None => {
                    assert!(
                        matches!(found, Err(DeviceError::Virtual { .. })),
                        "{name} has no device in sysfs: {found:?}"
                    );
                    continue;
                }
                Some(place) => place,
            };
            let d = found.unwrap_or_else(|e| panic!("{name}: {e}"));
            let Some((bus_id, node, local)) = place else {
                assert_eq!(d.local_cpus, None, "{name}");
                continue;
            };
            assert_eq!(
                (&d.bus_id, d.node, d.local_cpus.as_ref()),
                (&bus_id, node, Some(&local)),
                "{name}"
            );
            let out = Command::new(common::bin("goset-run"))
                .args(["--dry-run", "--sample", "0", "--json", "-", "--near", &name])
                .output()
                .unwrap();
            let r = report(&out);
            assert_eq!(r["selection"]["near"]["bus_id"], bus_id.as_str(), "{name}");
            let warned = String::from_utf8_lossy(&out.stderr).contains("warning: --near");
            let local_to_all = online.iter().all(|c| local.contains(c));
            assert_eq!(warned, node.is_none() && local_to_all, "{name}");
            checked.push(format!("{name} {bus_id} node {node:?}"));
        }
    }
    eprintln!("checked: {checked:?}");
}
