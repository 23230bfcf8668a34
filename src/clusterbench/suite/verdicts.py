"""The checks of `clusterbench run`: each a PASS, WARN or FAIL with one line of detail.

Judged from run.json alone, so `clusterbench report` and a fleet script see the same verdicts.
"""

from __future__ import annotations

from typing import Any

from clusterbench.hw.links import link_line

# Measured all_reduce busbw below this share of the link's one-direction bandwidth is a WARN:
# REFERENCE.md section 2 puts the usual NVLink 4 ceiling at about 370/450 = 0.82 without NVLS.
BUSBW_SHARE_OK = 0.6
# nccl-tests' pass rule for an expected bandwidth (NCCL_TESTS_MIN_BW): fail below 0.9 x the value.
EXPECTED_SHARE = 0.9
MFU_LOW = 0.10


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"check": name, "status": status, "detail": detail}


def comm_checks(doc: dict[str, Any], expect_busbw_gbs: float | None) -> list[dict[str, str]]:
    rows = doc.get("comm") or []
    if not rows:
        return []
    wrong = [r for r in rows if r.get("wrong")]
    out = [_check("comm correctness", "FAIL" if wrong else "PASS",
                  f"{sum(r['wrong'] for r in wrong)} wrong elements in {len(wrong)} of {len(rows)} measurements"
                  if wrong else f"every element of {len(rows)} measurements arrived correctly")]
    ar = [r for r in rows if r["op"] == "all_reduce"]
    if not ar or ar[0]["world_size"] < 2:
        return out
    top = max(r["size_bytes"] for r in ar)
    large = [r for r in ar if r["size_bytes"] >= top / 4]
    busbw = sum(r["busbw_gbps"] for r in large) / len(large) / 8  # GB/s
    figure = f"all_reduce busbw {busbw:.2f} GB/s at the largest sizes"
    link_gbs, link_label = link_line(doc)  # label: the link, or why there is none
    if expect_busbw_gbs is not None:
        ok = busbw >= EXPECTED_SHARE * expect_busbw_gbs
        out.append(_check("comm bandwidth", "PASS" if ok else "FAIL",
                          f"{figure}; expected {expect_busbw_gbs:g} GB/s, fail below {EXPECTED_SHARE:g} x that"))
    elif link_gbs is None:
        out.append(_check("comm bandwidth", "PASS", f"{figure}; no theoretical link figure to compare with"))
    else:
        # Above 100% is in-switch reduction (NVLS/SHARP), not an error (REFERENCE.md section 1).
        share = busbw / link_gbs
        status = "PASS" if share >= BUSBW_SHARE_OK else "WARN"
        out.append(_check("comm bandwidth", status, f"{figure} = {share:.0%} of {link_label}"))
    return out


def hardware_checks(doc: dict[str, Any]) -> list[dict[str, str]]:
    gpus = (doc.get("hardware") or {}).get("gpus") or []
    if not gpus:
        return []
    if not all(g.get("pcie_under_load") for g in gpus):
        return [_check("PCIe links", "PASS", "not judged: the links were read while the GPUs were idle")]
    slow = [str(g.get("index")) for g in gpus if g.get("pcie_downtrained")]
    if slow:
        return [_check("PCIe links", "WARN", f"GPU {', '.join(slow)} ran below the link's max generation "
                                             "or width under load")]
    return [_check("PCIe links", "PASS", f"{len(gpus)} GPUs at their link's generation and width under load")]


def train_checks(doc: dict[str, Any]) -> list[dict[str, str]]:
    train = doc.get("train")
    if not train:
        return []
    summary = train.get("summary") or {}
    status = summary.get("status")
    steps = len(train.get("losses") or [])
    if status != "complete":
        why = "the loss became NaN/inf" if status == "nan" else "the run stopped early"
        return [_check("training", "FAIL", f"{why} after {steps} steps")]
    out = [_check("training", "PASS", f"{steps} steps, tgs {summary['tgs']:,.0f} tokens/device/s, "
                                      f"{summary['tflops_per_device']:.4g} TFLOPS/device")]
    mfu = summary.get("mfu")
    if mfu is not None:
        out.append(_check("MFU", "WARN" if mfu < MFU_LOW else "PASS",
                          f"{mfu:.1%} of {summary.get('peak_source', 'the peak')}"))
    al = train.get("alignment")
    if al:
        out.append(_check("loss alignment", al["verdict"],
                          f"MRE {al['mre']:.4f} (limit {al['mre_limit']:g}), variance {al['variance']:.3g} "
                          f"(limit {al['variance_limit']:.3g}) vs {al['reference']}"))
    else:
        out.append(_check("loss alignment", "WARN", "not judged: no reference curve matches this task"))
    return out


def judge(doc: dict[str, Any], expect_busbw_gbs: float | None = None) -> list[dict[str, str]]:
    checks = hardware_checks(doc) + comm_checks(doc, expect_busbw_gbs) + train_checks(doc)
    if doc.get("status") == "failed" and doc.get("error"):
        checks.append(_check("run", "FAIL", doc["error"]))
    return checks


def overall(checks: list[dict[str, str]]) -> str:
    statuses = {c["status"] for c in checks}
    return "FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "PASS"
