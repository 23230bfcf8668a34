"""The facts a node's counters and events are judged by, in one table without I/O: each recommended action in
words, what each NVIDIA Xid code means and calls for, and each counter hw/counters.py reads with how it is
judged (docs/methodology.md §20).

The Xid entries follow NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) and its GPU debug guidelines:
the kind says where NVIDIA places the usual cause, the severity how the node rules judge a recent one (its metric,
XID_METRIC), the action what an operator does first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterbench.results.findings import Severity

# Where the usual cause lies; "unknown" is an Xid this table does not list (a newer driver's).
Kind = Literal["hardware", "driver", "application", "unknown"]

ACTIONS: dict[str, str] = {
    "reset": "reset the GPU",
    "reset_rma": "reset the GPU; drain the node and RMA the GPU if it happens again",
    "rma": "drain the node and RMA the part",
    "reseat": "reseat the GPU or its riser, then check its PCIe link",
    "reseat_rma": "reboot the node; if the GPU falls off again, reseat it or its riser, then RMA it",
    "nvlink": "reset the GPU; if it repeats, check its NVLink connections and the GPU or switch at the far end",
    "cable": "check the cable and the transceiver",
    "reboot": "reboot the node",
    "reboot_rma": "reboot the node; drain it and RMA the GPU if it happens again",
    "asked": "do what the driver's line asks: reset the GPU or reboot the node",
    "driver": "check the driver and firmware versions",
    "application": "application bug: no action on the node",
    "earlier": "no action of its own: act on the error logged before it",
    "watch": "keep watching: drain if it grows",
    "load": "read the link again under load (clusterbench info --pcie-load): an idle GPU lowers its generation",
    "triage": "an Xid this table does not know: look it up in NVIDIA's Xid catalog and triage it by hand",
    "earlier_xid": "none now: what it left that lasts, the counters and the device checks judge",
}


@dataclass(frozen=True)
class Xid:
    code: int
    what: str  # in a few words
    kind: Kind
    severity: Severity
    action: str  # a key of ACTIONS


XIDS: dict[int, Xid] = {
    x.code: x
    for x in (
        Xid(13, "graphics engine exception", "application", "info", "application"),
        Xid(31, "GPU memory page fault", "application", "info", "application"),
        # Reported by the DMA engine that feeds the GPU over PCIe: NVIDIA points at the link's signal quality.
        Xid(32, "invalid or corrupted push buffer stream (PBDMA)", "hardware", "warning", "reseat"),
        Xid(43, "GPU stopped processing: a channel reset after an application fault", "application", "info",
            "application"),
        Xid(44, "graphics engine fault during a context switch", "driver", "critical", "reset"),
        Xid(45, "preemptive cleanup after an earlier error", "application", "info", "earlier"),
        Xid(46, "GPU stopped processing", "driver", "critical", "reset"),
        Xid(48, "double-bit ECC error", "hardware", "critical", "reset_rma"),
        Xid(61, "internal micro-controller breakpoint or warning", "hardware", "critical", "reset"),
        Xid(62, "internal micro-controller halt", "hardware", "critical", "reset"),
        Xid(63, "ECC page retirement or row remap recorded", "hardware", "warning", "reset"),
        Xid(64, "ECC page retirement or row remap failed to record", "hardware", "critical", "rma"),
        Xid(68, "video decoder (NVDEC0) exception", "driver", "warning", "reset"),
        Xid(69, "graphics engine class error", "driver", "warning", "reset"),
        Xid(74, "NVLink error", "hardware", "critical", "nvlink"),
        Xid(79, "GPU has fallen off the bus", "hardware", "critical", "reseat_rma"),
        Xid(92, "high single-bit ECC error rate", "hardware", "warning", "watch"),
        Xid(94, "contained ECC error: only the application that met it was stopped", "hardware", "warning", "reset"),
        Xid(95, "uncontained ECC error: every application on the GPU was stopped", "hardware", "critical", "reset"),
        Xid(110, "security fault", "hardware", "critical", "reset_rma"),
        Xid(119, "GSP RPC timeout", "driver", "critical", "reset"),
        Xid(120, "GSP error", "driver", "critical", "reset"),
        Xid(121, "C2C link corrected error (NVLink-C2C to the CPU)", "hardware", "warning", "reset"),
        Xid(136, "link training failed", "hardware", "critical", "reseat"),
        Xid(140, "unrecovered ECC error: pages could not be offlined or rows remapped", "hardware", "critical",
            "reset_rma"),
        Xid(143, "GPU initialization failure", "hardware", "critical", "reboot_rma"),
        Xid(154, "GPU recovery action changed: the driver asks for a reset or a reboot", "driver", "critical",
            "asked"),
    )
}

# The figure a recent Xid counts toward, by its own severity, which the node rules judge: one Xid 92 (a high
# single-bit error rate: keep watching) is no Xid 79 (a GPU fallen off the bus).
XID_METRIC: dict[Severity, str] = {"critical": "counters.xid_critical", "warning": "counters.xid_warning",
                                   "info": "counters.xid_info"}


def xid(code: int) -> Xid:
    """The entry of `code`; one this table does not list is worth a warning and a look by hand."""
    return XIDS.get(code) or Xid(code, "an Xid this table does not know", "unknown", "warning", "triage")


# The InfiniBand port states of the sysfs `state` file ("4: ACTIVE").
IB_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
IB_ACTIVE = 4


@dataclass(frozen=True)
class Counter:
    name: str  # the COUNTER of a snapshot's "SUBJECT/COUNTER" key
    of: Literal["GPU", "NIC", "InfiniBand port"]
    what: str  # in a few words, plural for a count
    severity: Severity
    action: str  # a key of ACTIONS
    metric: str  # the figure it counts toward, which the node rules judge; "": none
    now: bool  # wrong now when it reads other than `healthy`: a state, or a count that should stay 0
    grows: bool  # wrong when it grows between two readings
    healthy: float = 0
    per: int = 1  # how many counts make one event: a link flap is two carrier changes, down and up
    event: str = ""  # what one event is called where `per` > 1


COUNTERS: dict[str, Counter] = {
    c.name: c
    for c in (
        Counter("ecc_uncorrected", "GPU", "uncorrectable ECC errors since the driver loaded", "critical",
                "reset_rma", "counters.ecc_uncorrected", now=True, grows=True),
        Counter("retired_pending", "GPU", "retired pages wait for a GPU reset", "critical", "reset",
                "counters.retired_pending", now=True, grows=False),
        Counter("remap_pending", "GPU", "row remaps wait for a GPU reset", "critical", "reset",
                "counters.remap_pending", now=True, grows=False),
        Counter("remap_failed", "GPU", "a row remap failed: the memory has no spare rows left", "critical", "rma",
                "counters.remap_failed", now=True, grows=False),
        Counter("pcie_width_drop", "GPU", "PCIe lanes below the link's maximum", "warning", "reseat",
                "counters.pcie_downtrained", now=True, grows=False),
        # Not judged here: an idle GPU lowers its generation to save power, so a reading alone cannot tell. The
        # host_device check reads the generation while its copies load the link: that reading is judged.
        Counter("pcie_gen_drop", "GPU", "PCIe generations below the link's maximum", "info", "load", "",
                now=True, grows=False),
        Counter("pcie_replays", "GPU", "PCIe replays", "warning", "reseat", "counters.pcie_replays",
                now=False, grows=True),
        Counter("rx_errors", "NIC", "receive errors", "warning", "cable", "counters.nic_errors",
                now=False, grows=True),
        Counter("tx_errors", "NIC", "transmit errors", "warning", "cable", "counters.nic_errors",
                now=False, grows=True),
        # Drops are often the host's own (a full ring, a protocol nobody listens to): watched, not cabled.
        Counter("rx_dropped", "NIC", "received packets dropped", "warning", "watch", "counters.nic_errors",
                now=False, grows=True),
        Counter("tx_dropped", "NIC", "packets dropped before sending", "warning", "watch", "counters.nic_errors",
                now=False, grows=True),
        Counter("carrier_changes", "NIC", "carrier changes", "critical", "cable", "counters.link_flaps",
                now=False, grows=True, per=2, event="link flaps"),
        Counter("port_state", "InfiniBand port", "port state", "critical", "cable", "counters.ib_ports_down",
                now=True, grows=False, healthy=IB_ACTIVE),
        Counter("symbol_error", "InfiniBand port", "symbol errors", "warning", "cable", "counters.ib_errors",
                now=False, grows=True),
        Counter("link_error_recovery", "InfiniBand port", "link error recoveries", "warning", "cable",
                "counters.ib_errors", now=False, grows=True),
        Counter("port_rcv_errors", "InfiniBand port", "receive errors", "warning", "cable", "counters.ib_errors",
                now=False, grows=True),
        Counter("excessive_buffer_overrun_errors", "InfiniBand port", "buffer overruns", "warning", "cable",
                "counters.ib_errors", now=False, grows=True),
        # Each time the port's link went down is a flap, as a carrier change down and up is on a NIC.
        Counter("link_downed", "InfiniBand port", "link downs", "critical", "cable", "counters.link_flaps",
                now=False, grows=True),
    )
}
