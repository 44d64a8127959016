//! Captured `/proc` texts shared by the noise unit tests (compiled for tests only).
//!
//! Owns: the verbatim and hand-made `/proc/interrupts`, `/proc/softirqs` and `/proc/stat` texts
//! and [`snap`], which makes a [`Snapshot`] of them. Must not: hold assertions.

use super::Snapshot;
use std::time::Instant;

/// `/proc/interrupts` of this 2-vCPU KVM guest (kernel 6.18), captured verbatim.
pub(super) const X86_KVM_INTERRUPTS: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 25:          0          1  IO-APIC   6-edge      ACPI:Ged
 26:          0         15  IO-APIC   4-edge      ttyS0
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
 29:          0          0 PCI-MSIX-0000:00:01.0   1-edge      virtio0-inflate
 30:          0          0 PCI-MSIX-0000:00:01.0   2-edge      virtio0-deflate
 31:          0         67 PCI-MSIX-0000:00:01.0   3-edge      virtio0-stats
 32:         44          0 PCI-MSIX-0000:00:01.0   4-edge      virtio0-reporting_vq
 33:          0          0 PCI-MSIX-0000:00:05.0   0-edge      virtio4-config
 34:         18          0 PCI-MSIX-0000:00:05.0   1-edge      virtio4-input
 35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config
 36:          0      47877 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 38:          0       2224 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       1499          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 40:          0          0 PCI-MSIX-0000:00:04.0   0-edge      virtio3-config
 41:       1570          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx
 42:          0       2791 PCI-MSIX-0000:00:04.0   2-edge      virtio3-tx
 43:          1          0 PCI-MSIX-0000:00:04.0   3-edge      virtio3-event
NMI:          0          0   Non-maskable interrupts
LOC:      14523      14824   Local timer interrupts
SPU:          0          0   Spurious interrupts
PMI:          0          0   Performance monitoring interrupts
IWI:          1          0   IRQ work interrupts
RTR:          0          0   APIC ICR read retries
RES:       7404       5283   Rescheduling interrupts
CAL:      41488      24310   Function call interrupts
TLB:       4848       3428   TLB shootdowns
TRM:          0          0   Thermal event interrupts
HYP:         93         30   Hypervisor callback interrupts
ERR:          0
MIS:          0
PIN:          0          0   Posted-interrupt notification event
NPI:          0          0   Nested posted-interrupt event
PIW:          0          0   Posted-interrupt wakeup event
";

/// `/proc/softirqs` of the same machine, captured verbatim.
pub(super) const X86_KVM_SOFTIRQS: &str = "                    CPU0       CPU1       
          HI:          0          0
       TIMER:       4466       3902
      NET_TX:          4          0
      NET_RX:       1461       2217
       BLOCK:          0      47876
    IRQ_POLL:          0          0
     TASKLET:         25          1
       SCHED:      10126       8192
     HRTIMER:          0          0
         RCU:       8848      11393
";

/// The head of `/proc/stat` of the same machine (the `intr` line shortened).
pub(super) const X86_KVM_STAT: &str = "cpu  4341 0 2055 60448 300 0 57 9 0 0
cpu0 1810 0 807 30944 13 0 4 3 0 0
cpu1 2531 0 1247 29503 286 0 53 6 0 0
intr 164068 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 15
ctxt 339295
btime 1700000000
processes 4242
procs_running 1
procs_blocked 0
softirq 159999 0 8368 4 3678 47876 0 26 18318 0 20241
";

/// A 4-CPU arm64 server with CPU 2 offline (its column is absent): GICv3 PPIs (arch timer,
/// PMU, vgic), SPIs and ITS MSIs, IPI rows, and the single-number `Err` row.
pub(super) const ARM64_INTERRUPTS: &str = "           CPU0       CPU1       CPU3
 10:     812345     734567     698765     GICv3  27 Level     arch_timer
 12:          0          0          0     GICv3  23 Level     arm-pmu
 13:          0          0          0     GICv3  25 Level     vgic
 14:        310          0          0     GICv3  33 Level     uart-pl011
 15:          0          0       1200     GICv3  44 Level     smmu-event
 42:       9000          0          0     ITS-MSI 524288 Edge      nvme0q0
 43:          0      70000          0     ITS-MSI 524289 Edge      eth0-TxRx-0
 50:          5          5          5     GICv3 1060 Level     eppi-device
IPI0:      2001       3002       4003       Rescheduling interrupts
IPI1:       501        602        703       Function call interrupts
IPI2:         0          0          0       CPU stop interrupts
IPI3:         0          0          0       CPU stop (for crash dump) interrupts
IPI4:        11         12         13       Timer broadcast interrupts
IPI5:        21         22         23       IRQ work interrupts
IPI6:         0          0          0       CPU wake-up interrupts
Err:          0
";

/// An 8-CPU x86 host (CPUs 4 and 5 offline) with IO-APIC, PCI-MSI and managed NVMe
/// queues, `ERR`/`MIS`, and a named row printed with fewer columns than CPUs.
pub(super) const X86_HOST_INTERRUPTS: &str = "            CPU0       CPU1       CPU2       CPU3       CPU6       CPU7
   0:         44          0          0          0          0          0   IO-APIC   2-edge      timer
   8:          0          0          0          1          0          0   IO-APIC   8-edge      rtc0
   9:          0        120          0          0          0          0   IO-APIC   9-fasteoi   acpi
 120:          0          0          0          0          0          0   PCI-MSI 65536-edge      nvme0q0
 121:      12000          0          0          0          0          0   PCI-MSI 65537-edge      nvme0q1
 124:          0          0          0          0      88000          0   PCI-MSI 524288-edge      enp3s0-rx-0
NMI:          3          3          3          3          3          3   Non-maskable interrupts
LOC:    1000000    1100000    1200000    1300000    1600000    1700000   Local timer interrupts
SPU:          0          0          0          0          0          0   Spurious interrupts
PMI:          3          3          3          3          3          3   Performance monitoring interrupts
IWI:         70         80         90        100        130        140   IRQ work interrupts
RTR:          0          0          0          0          0          0   APIC ICR read retries
RES:       5000       6000       7000       8000       9000      10000   Rescheduling interrupts
CAL:        100        200        300        400        500        600   Function call interrupts
TLB:         10         20         30         40         50         60   TLB shootdowns
TRM:          0          0          0          0          0          0   Thermal event interrupts
THR:          0          0          0          0          0          0   Threshold APIC interrupts
DFR:          0          0          0          0          0          0   Deferred Error APIC interrupts
MCE:          0          0          0          0          0          0   Machine check exceptions
MCP:         40         40         40         40         40         40   Machine check polls
HYP:          7          8
ERR:          1
MIS:          0
PIN:          0          0          0          0          0          0   Posted-interrupt notification event
NPI:          0          0          0          0          0          0   Nested posted-interrupt event
PIW:          0          0          0          0          0          0   Posted-interrupt wakeup event
";

/// A snapshot of the three texts, taken now.
pub(super) fn snap(interrupts: &str, softirqs: &str, stat: &str) -> Snapshot {
    Snapshot::from_texts(
        Instant::now(),
        Ok(interrupts.to_string()),
        Ok(softirqs.to_string()),
        Ok(stat.to_string()),
    )
}
