//! `--near DEVICE`: the sysfs device a name stands for, and its locality.
//!
//! Owns: the forms `--near` takes and how each is found under an [`FsRoot`]:
//! - a network interface: `/sys/class/net/<name>/device`;
//! - a block device: `/sys/class/block/<name>/device`, for a partition its disk's;
//! - a PCI address: `/sys/bus/pci/devices/<address>`, written `0000:3b:00.0` or `3b:00.0`
//!   (domain 0);
//! - `gpuN`: the N-th GPU in PCI bus order, as CUDA numbers them with
//!   `CUDA_DEVICE_ORDER=PCI_BUS_ID`: the display-class PCI devices (class `0x03xxxx`) and
//!   processing accelerators (`0x12xxxx`, as AMD Instinct cards report themselves),
//!   NVIDIA's alone where there are any (CUDA sees no other: a workstation's integrated GPU
//!   comes first in bus order), else all but the display controllers of server management chips
//!   (ASPEED, Matrox), on which nobody computes.
//!
//! The locality is that of the nearest device, walking up from the named one, that has a
//! `local_cpulist` (a PCI function: a virtio NIC's is its PCI device's, an NVMe namespace's
//! its controller's), with that device's `numa_node` (-1: none); where no device on the way
//! has a `local_cpulist`, the nearest `numa_node`. Must not: decide what the locality does
//! to the selection (`select` does), or print.
//!
//! Two layers, as in the rest of the module: pure functions of names and attribute text
//! ([`PciAddress::parse`], [`gpu_order`]), and [`Device::find`], which reads sysfs.

use super::parse::{parse_cpulist, parse_id};
use crate::fsroot::FsRoot;
use std::fmt;

/// PCI vendor id of NVIDIA.
const NVIDIA: u16 = 0x10de;

/// Vendors of the display controllers built into server management chips (BMCs): ASPEED
/// and Matrox (HPE iLO, Dell iDRAC).
const BMC_DISPLAY: [u16; 2] = [0x1a03, 0x102b];

/// Where the kernel lists PCI functions.
const PCI: &str = "/sys/bus/pci/devices";

/// PCI base classes of GPUs: display controllers (`0x03`, NVIDIA's and most others) and
/// processing accelerators (`0x12`: AMD Instinct, Intel Gaudi).
const GPU_CLASSES: [u32; 2] = [0x03, 0x12];

/// What `--near` accepts, for the messages of a name that is none of it.
const ACCEPTED: &str = "--near takes a network interface (/sys/class/net), a block device \
     (/sys/class/block), a PCI address (0000:3b:00.0 or 3b:00.0) or gpuN (the N-th GPU in PCI \
     bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them)";

/// How the device was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A network interface.
    Net,
    /// A block device (disk or partition).
    Block,
    /// A PCI address.
    Pci,
    /// `gpuN`.
    Gpu,
}

/// A device `--near` names, and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The name as given (`eth0`, `nvme0n1p1`, `3b:00.0`, `gpu1`).
    pub name: String,
    /// How it was named.
    pub kind: DeviceKind,
    /// The sysfs directory the locality was read from, as the kernel names it
    /// (`/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0`).
    pub sysfs: String,
    /// That directory's name: the PCI address of a PCI device (`0000:3b:00.0`).
    pub bus_id: String,
    /// Its NUMA node (`numa_node`); `None` for -1 or where there is none.
    pub node: Option<usize>,
    /// Its local CPUs (`local_cpulist`); `None` where there is none.
    pub local_cpus: Option<Vec<usize>>,
}

/// Why `--near`'s value names no device with a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// No network interface, block device or PCI device of that name.
    Unknown,
    /// A network interface or block device with no hardware behind it (`lo`, a bridge, a loop
    /// device).
    Virtual { class: &'static str },
    /// `gpuN` past the GPUs found, in bus order.
    NoGpu { index: usize, gpus: Vec<String> },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Unknown => write!(
                f,
                "no such network interface, block device or PCI device; {ACCEPTED}"
            ),
            DeviceError::Virtual { class } => write!(
                f,
                "a virtual {class} (no device behind it in sysfs), near no CPU; {ACCEPTED}"
            ),
            DeviceError::NoGpu { gpus, .. } if gpus.is_empty() => {
                f.write_str("no GPU: this machine has no display-class PCI device")
            }
            DeviceError::NoGpu { index, gpus } => {
                let listed: Vec<String> = (gpus.iter().enumerate())
                    .map(|(i, a)| format!("gpu{i} {a}"))
                    .collect();
                write!(
                    f,
                    "no GPU {index}: this machine has {} (in PCI bus order: {})",
                    gpus.len(),
                    listed.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for DeviceError {}

/// A PCI function's address: domain, bus, device, function. Ordered as the bus is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl PciAddress {
    /// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hex digits in either case.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let hex = |s: &str, digits: std::ops::RangeInclusive<usize>| {
            (digits.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(s, 16).ok())
                .flatten()
        };
        let (rest, function) = text.rsplit_once('.')?;
        let fields: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match fields[..] {
            [d, b, s] => (hex(d, 4..=8)?, b, s),
            [b, s] => (0, b, s),
            _ => return None,
        };
        let (bus, device, function) =
            (hex(bus, 2..=2)?, hex(device, 2..=2)?, hex(function, 1..=1)?);
        (device < 32 && function < 8).then_some(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    /// As the kernel names the device's directory: `0000:3b:00.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A PCI function as `gpuN` looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub address: PciAddress,
    /// `class`, such as `0x030200` (3D controller).
    pub class: u32,
    /// `vendor`, such as `0x10de`.
    pub vendor: u16,
}

/// The GPUs among `functions`, in the order `gpuN` numbers them (see the module docs).
pub fn gpu_order(functions: &[PciFunction]) -> Vec<PciAddress> {
    let display: Vec<&PciFunction> = (functions.iter())
        .filter(|f| GPU_CLASSES.contains(&(f.class >> 16)))
        .collect();
    let nvidia = display.iter().any(|f| f.vendor == NVIDIA);
    let mut gpus: Vec<PciAddress> = (display.into_iter())
        .filter(|f| {
            if nvidia {
                f.vendor == NVIDIA
            } else {
                !BMC_DISPLAY.contains(&f.vendor)
            }
        })
        .map(|f| f.address)
        .collect();
    gpus.sort();
    gpus
}

/// A hex attribute such as `class` (`0x030000`).
fn hex_attribute(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// `gpuN`'s N.
fn gpu_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("gpu")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl Device {
    /// Finds the device `name` stands for under `root` and reads its locality.
    pub fn find(root: &FsRoot, name: &str) -> Result<Device, DeviceError> {
        let (kind, dir) = if let Some(index) = gpu_index(name) {
            (DeviceKind::Gpu, gpu_dir(root, index)?)
        } else if let Some(address) = PciAddress::parse(name) {
            let dir = root.canonical(&format!("/sys/bus/pci/devices/{address}"));
            (DeviceKind::Pci, dir.ok_or(DeviceError::Unknown)?)
        } else {
            // A name is one directory entry: never a path that leads elsewhere in the tree.
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
                return Err(DeviceError::Unknown);
            }
            class_device(root, name)?
        };
        let (sysfs, node, local_cpus) = locality(root, &dir);
        Ok(Device {
            name: name.to_string(),
            kind,
            bus_id: sysfs.rsplit('/').next().unwrap_or_default().to_string(),
            sysfs,
            node,
            local_cpus,
        })
    }

    /// Whether the device is near some CPUs rather than all: it has a NUMA node, or local
    /// CPUs that leave out some of `online`.
    pub fn has_locality(&self, online: &[usize]) -> bool {
        self.node.is_some()
            || (self.local_cpus.as_ref()).is_some_and(|l| online.iter().any(|c| !l.contains(c)))
    }
}

/// Every PCI function under `root`, with its class and vendor.
pub(super) fn pci_functions(root: &FsRoot) -> Vec<PciFunction> {
    (root.list(PCI).iter())
        .filter_map(|entry| {
            let attribute =
                |name: &str| hex_attribute(&root.read_opt(&format!("{PCI}/{entry}/{name}"))?);
            Some(PciFunction {
                address: PciAddress::parse(entry)?,
                class: attribute("class")?,
                vendor: attribute("vendor")? as u16,
            })
        })
        .collect()
}

/// The directory of the `index`-th GPU.
fn gpu_dir(root: &FsRoot, index: usize) -> Result<String, DeviceError> {
    let gpus = gpu_order(&pci_functions(root));
    let no_gpu = || DeviceError::NoGpu {
        index,
        gpus: gpus.iter().map(ToString::to_string).collect(),
    };
    let address = gpus.get(index).ok_or_else(no_gpu)?;
    root.canonical(&format!("{PCI}/{address}"))
        .ok_or_else(no_gpu)
}

/// The device directory of network interface or block device `name`.
fn class_device(root: &FsRoot, name: &str) -> Result<(DeviceKind, String), DeviceError> {
    let net = format!("/sys/class/net/{name}");
    if root.exists(&net) {
        let dir = root.canonical(&format!("{net}/device"));
        let virtual_net = DeviceError::Virtual {
            class: "network interface",
        };
        return Ok((DeviceKind::Net, dir.ok_or(virtual_net)?));
    }
    let block = format!("/sys/class/block/{name}");
    let Some(disk) = root.canonical(&block) else {
        return Err(DeviceError::Unknown);
    };
    // A partition's directory sits in its disk's, which has the `device` link.
    let disk = match root.exists(&format!("{block}/partition")) {
        true => disk
            .rsplit_once('/')
            .map_or(disk.clone(), |(up, _)| up.to_string()),
        false => disk,
    };
    let dir = root.canonical(&format!("{disk}/device"));
    let virtual_block = DeviceError::Virtual {
        class: "block device",
    };
    Ok((DeviceKind::Block, dir.ok_or(virtual_block)?))
}

/// The locality of the device at `dir`: the directory it was read from, the node and the
/// local CPUs (see the module docs).
fn locality(root: &FsRoot, dir: &str) -> (String, Option<usize>, Option<Vec<usize>>) {
    let node_of = |d: &str| {
        let id = parse_id(&root.read_opt(&format!("{d}/numa_node"))?)?;
        Some(usize::try_from(id).ok())
    };
    let mut nearest_node: Option<(String, Option<usize>)> = None;
    let mut at = dir.to_string();
    while at.starts_with("/sys/devices/") {
        if let Some(text) = root.read_opt(&format!("{at}/local_cpulist")) {
            let cpus = parse_cpulist(&text).ok();
            return (at.clone(), node_of(&at).flatten(), cpus);
        }
        if nearest_node.is_none() {
            nearest_node = node_of(&at).map(|n| (at.clone(), n));
        }
        let Some((up, _)) = at.rsplit_once('/') else {
            break;
        };
        at = up.to_string();
    }
    match nearest_node {
        Some((at, node)) => (at, node, None),
        None => (dir.to_string(), None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(address: &str, class: u32, vendor: u16) -> PciFunction {
        PciFunction {
            address: PciAddress::parse(address).unwrap(),
            class,
            vendor,
        }
    }

    #[test]
    fn pci_addresses_long_and_short_name_the_kernels_directory() {
        let name = |t: &str| PciAddress::parse(t).map(|a| a.to_string());
        assert_eq!(name("0000:3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(name("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(
            name("10000:e1:1f.7").as_deref(),
            Some("10000:e1:1f.7"),
            "a VMD domain"
        );
        for bad in [
            "3b:00",
            "3b:20.0",
            "3b:00.8",
            "3b:0.0",
            "x3b:00.0",
            "0:3b:00.0",
            "eth0",
            "",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad}");
        }
        assert!(PciAddress::parse("0000:3b:00.0") < PciAddress::parse("0000:af:00.0"));
        assert!(PciAddress::parse("0000:af:00.0") < PciAddress::parse("0001:00:00.0"));
    }

    #[test]
    fn gpus_are_numbered_in_bus_order_as_cuda_numbers_them() {
        let aspeed = function("02:00.0", 0x030000, 0x1a03);
        let intel_igpu = function("00:02.0", 0x030000, 0x8086);
        let h100 = |a: &str| function(a, 0x030200, NVIDIA);
        let nic = function("1a:00.0", 0x020000, 0x15b3);
        let order = |f: &[PciFunction]| -> Vec<String> {
            gpu_order(f).iter().map(ToString::to_string).collect()
        };
        // A server: the BMC's display controller comes first on the bus but is no GPU.
        assert_eq!(
            order(&[
                h100("af:00.0"),
                aspeed.clone(),
                nic.clone(),
                h100("3b:00.0")
            ]),
            ["0000:3b:00.0", "0000:af:00.0"]
        );
        // A workstation: CUDA does not see the integrated GPU.
        assert_eq!(
            order(&[intel_igpu.clone(), h100("01:00.0")]),
            ["0000:01:00.0"]
        );
        // Without NVIDIA, every display device but the BMC's (an AMD GPU, an Intel one), and
        // processing accelerators (an MI300X).
        let mi210 = function("c1:00.0", 0x038000, 0x1002);
        let mi300x = function("0d:00.0", 0x120000, 0x1002);
        assert_eq!(
            order(&[mi210, aspeed, intel_igpu, mi300x]),
            ["0000:00:02.0", "0000:0d:00.0", "0000:c1:00.0"]
        );
        assert_eq!(order(&[nic]), Vec::<String>::new());
    }

    #[test]
    fn gpu_names_and_attributes() {
        assert_eq!(gpu_index("gpu0"), Some(0));
        assert_eq!(gpu_index("gpu12"), Some(12));
        assert_eq!(gpu_index("gpu"), None);
        assert_eq!(gpu_index("gpu-1"), None);
        assert_eq!(gpu_index("gpux"), None);
        assert_eq!(hex_attribute("0x030200\n"), Some(0x030200));
        assert_eq!(hex_attribute("zz"), None);
    }

    #[test]
    fn locality_is_a_node_or_cpus_short_of_all() {
        let device = |node, local_cpus| Device {
            name: "eth0".into(),
            kind: DeviceKind::Net,
            sysfs: "/sys/devices/pci0000:00/0000:00:03.0".into(),
            bus_id: "0000:00:03.0".into(),
            node,
            local_cpus,
        };
        let online = [0, 1, 2, 3];
        assert!(!device(None, Some(vec![0, 1, 2, 3])).has_locality(&online));
        assert!(!device(None, None).has_locality(&online));
        assert!(device(None, Some(vec![0, 1])).has_locality(&online));
        assert!(device(Some(0), Some(vec![0, 1, 2, 3])).has_locality(&online));
    }

    #[test]
    fn messages_say_what_near_takes() {
        assert_eq!(
            DeviceError::Unknown.to_string(),
            format!("no such network interface, block device or PCI device; {ACCEPTED}")
        );
        let gpus = vec!["0000:3b:00.0".to_string(), "0000:af:00.0".to_string()];
        assert_eq!(
            DeviceError::NoGpu { index: 2, gpus }.to_string(),
            "no GPU 2: this machine has 2 (in PCI bus order: gpu0 0000:3b:00.0, gpu1 0000:af:00.0)"
        );
    }
}
