"""Where a GPU sits for the host's CPUs: its NUMA node and the CPUs local to it, from Linux's
sysfs entry for its PCI address (NVML names the address; sysfs lists the rest). A machine
without sysfs, or a platform that does not say, reads as unknown (None), never as a guess."""

from __future__ import annotations

from pathlib import Path

SYS = Path("/sys")


def pci_locality(bus_id: str, sys_root: Path = SYS) -> tuple[int | None, str | None]:
    """The NUMA node and local CPU list of the PCI device NVML names ``bus_id``
    (``00000000:18:00.0``; sysfs names it ``0000:18:00.0``). A node of -1 (the platform did not
    say) and anything unreadable are None."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    device = sys_root / "bus" / "pci" / "devices" / f"{domain[-4:]}:{rest}"

    def read(name: str) -> str | None:
        try:
            return (device / name).read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    node_text = read("numa_node")
    try:
        node = int(node_text) if node_text is not None else None
    except ValueError:
        node = None
    return (node if node is not None and node >= 0 else None), read("local_cpulist")
