"""How this host's idle CPUs wake, printed beside the hand-off figures that depend on it.

Why: a hop between two processes wakes a CPU that had nothing to do. On a KVM guest whose cpuidle driver is
`haltpoll`, `guest_halt_poll_ns` says how long an idle vCPU polls before it halts; a halted vCPU is woken
through the hypervisor (tens of microseconds per hop), a polling one is not. Linux's default is 200000 ns; a
guest booted with `haltpoll.guest_halt_poll_ns=0` halts at once, and the idle round trips show it. To compare
both on such a guest (root; it changes the whole machine, so set it back after):
    echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns   # then rerun; echo 0 > ... to restore
"""

from __future__ import annotations

from pathlib import Path

CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")
HALT_POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


def describe() -> str:
    """One line: the cpuidle driver and governor, and the guest halt-poll window where there is one."""
    def read(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError:
            return "?"

    line = f"cpuidle driver {read(CPUIDLE / 'current_driver')}, governor {read(CPUIDLE / 'current_governor')}"
    if HALT_POLL_NS.exists():
        line += f", guest_halt_poll_ns {read(HALT_POLL_NS)}"
    return line
