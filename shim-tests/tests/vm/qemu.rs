//! Booting a guest under QEMU's software emulation, with a deadline and one retry.

use crate::Shape;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A boot never takes longer (about 100 s here for some 60 scenarios, each of which gives up
/// after [`crate::script::SCENARIO_LIMIT_S`]): a guest past it is killed.
pub(crate) const BOOT_DEADLINE: Duration = Duration::from_secs(480);

/// Boots `shape` and returns what the guest printed on its serial console. A guest that does
/// not finish in [`BOOT_DEADLINE`] is killed and booted once more: under software emulation a
/// guest has been seen to stall (1 run of the test in about 17 here, cause not yet found); a
/// second stall fails the test, with what the guest printed.
pub(crate) fn boot(shape: &Shape, kernel: &Path, initrd: &Path) -> String {
    match boot_once(shape, kernel, initrd) {
        Ok(text) => text,
        Err(stalled) => {
            // Straight to stderr: the harness keeps a passing test's eprintln! to itself.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "{}: the guest ran past {BOOT_DEADLINE:?}, killed; booting again. It printed:\n{stalled}",
                shape.name
            );
            boot_once(shape, kernel, initrd).unwrap_or_else(|text| {
                panic!(
                    "{}: the guest ran past {BOOT_DEADLINE:?} twice: killed\n{text}",
                    shape.name
                )
            })
        }
    }
}

/// One boot: the console, or `Err` with what it printed when it ran past the deadline.
fn boot_once(shape: &Shape, kernel: &Path, initrd: &Path) -> Result<String, String> {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max,vendor=GenuineIntel",
    ])
    .args(["-smp", shape.smp])
    .args(["-m", &(128 * shape.nodes.len()).to_string()]);
    for (id, cpus) in shape.nodes.iter().enumerate() {
        cmd.args(["-object", &format!("memory-backend-ram,id=m{id},size=128M")]);
        let cpus = cpus.replace(',', ",cpus=");
        cmd.args([
            "-numa",
            &format!("node,nodeid={id},cpus={cpus},memdev=m{id}"),
        ]);
    }
    if shape.gpus {
        // Display devices (PCI class 0x0380) behind expander bridges whose root buses the
        // guest's ACPI puts on nodes 0 and 1: gpu0 and gpu1 to goset, with a numa_node each.
        cmd.args(["-vga", "none"]);
        for (node, bus) in [(0, 32), (1, 64)] {
            cmd.args([
                "-device",
                &format!("pxb,id=pxb{node},bus_nr={bus},numa_node={node},bus=pci.0"),
                "-device",
                &format!("bochs-display,bus=pxb{node},addr=0"),
            ]);
        }
    }
    cmd.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 mitigations=off panic=-1 quiet",
            "-nographic",
            "-no-reboot",
            "-display",
            "none",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: prctl in the child before exec; no memory is passed.
    unsafe {
        cmd.pre_exec(|| {
            // QEMU dies with the test, however the test ends.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start qemu-system-x86_64");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).replace('\r', "")
    });
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > BOOT_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(reader.join().unwrap())
}
