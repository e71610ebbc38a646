"""What the acceptance gate's measuring tools print, read into figures.

The shapes are the tools' own, from their sources and from published runs (each fixture in
tests/fixtures/accept says where it comes from):

- nccl-tests ``all_reduce_perf``: '#' header lines, then one row per message size: size, count,
  type, redop, root, then time, algbw, busbw and #wrong out of place and again in place; a
  trailer with "Out of bounds values" and "Avg bus bandwidth". Rows may carry a launcher's
  prefix (``srun -l``'s "0: ", Open MPI's "[1,0]<stdout>:"); the column widths changed in
  2.17/2.18, so rows are split on white space, never cut by position. The figure is the bus
  bandwidth at the largest size, the mean of out of place and in place: what Azure's health
  checks read at 16 GiB (its "Avg bus bandwidth" of a one-size run).
- perftest ``ib_write_bw``: a framed test description (Device, Link type), then the
  "#bytes #iterations BW peak BW average MsgRate" header and one row per size; Gb/sec with
  ``--report_gbits``, else MB/sec (MiB/sec since perftest 24.07; the number is MiB/s in both).
  The figure is the average bandwidth at the largest size, in Gb/s.
- DCGM ``dcgmi diag -j``: JSON; DCGM 3.x under "DCGM GPU Diagnostic" (per-GPU results keyed
  ``gpu_id``, a string), DCGM 4.x under "DCGM Diagnostic" (``entity_id``, an integer); status
  "Pass", "Skip" or "Fail" (a warning is a "Fail" in the JSON), a run that could not start
  says ``runtime_error``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_PREFIX_RE = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<stdout>:)")
_NCCL_ROW_RE = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<t1>[\d.]+)\s+(?P<algbw1>[\d.]+)\s+(?P<busbw1>[\d.]+)\s+(?P<wrong1>\S+)"
    r"\s+(?P<t2>[\d.]+)\s+(?P<algbw2>[\d.]+)\s+(?P<busbw2>[\d.]+)\s+(?P<wrong2>\S+)")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_IB_HEADER_RE = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>Gb|MB|MiB)/sec\]")
_IB_FIELD_RE = re.compile(r"^\s*(Device|Link type)\s*:\s*(\S+)")
_MIB_TO_GBIT = 2 ** 20 * 8 / 1e9


class ToolOutputError(ValueError):
    """Output a tool's parser cannot read (the message says what was missing)."""


@dataclass(frozen=True)
class NcclRun:
    sizes: tuple[int, ...]
    busbw_out_of_place: tuple[float, ...]  # GB/s, one per size
    busbw_in_place: tuple[float, ...]
    wrong: int  # the #wrong columns summed (0 where validation was off: "N/A")
    out_of_bounds: int | None  # the trailer's count; None when the output has no trailer

    @property
    def largest_size(self) -> int:
        return self.sizes[-1]

    @property
    def busbw(self) -> float:
        """GB/s at the largest size, out of place and in place averaged."""
        return (self.busbw_out_of_place[-1] + self.busbw_in_place[-1]) / 2

    @property
    def problem(self) -> str:
        """Why the run's figures cannot be trusted ("" when they can)."""
        bad = self.wrong or self.out_of_bounds
        return f"{bad} wrong values (data corruption)" if bad else ""


def _strip_prefix(line: str) -> str:
    return _PREFIX_RE.sub("", line, count=1)


def _wrong(text: str) -> int:
    return int(text) if text.isdigit() else 0


def parse_all_reduce_perf(text: str) -> NcclRun:
    rows, oob = [], None
    for raw in text.splitlines():
        line = _strip_prefix(raw)
        found = _OOB_RE.match(line.strip())
        if found:
            oob = int(found.group(1))
            continue
        if line.lstrip().startswith("#"):
            continue
        row = _NCCL_ROW_RE.match(line)
        if row:
            rows.append(row)
    if not rows:
        raise ToolOutputError("all_reduce_perf printed no result rows (size count type redop "
                              "root time algbw busbw #wrong ...): see its output for why")
    rows.sort(key=lambda r: int(r["size"]))
    return NcclRun(sizes=tuple(int(r["size"]) for r in rows),
                   busbw_out_of_place=tuple(float(r["busbw1"]) for r in rows),
                   busbw_in_place=tuple(float(r["busbw2"]) for r in rows),
                   wrong=sum(_wrong(r["wrong1"]) + _wrong(r["wrong2"]) for r in rows),
                   out_of_bounds=oob)


@dataclass(frozen=True)
class IbRun:
    device: str
    link_type: str
    sizes: tuple[int, ...]
    average_gbits: tuple[float, ...]  # Gb/s, one per size

    @property
    def largest_size(self) -> int:
        return self.sizes[-1]

    @property
    def gbits(self) -> float:
        """Average Gb/s at the largest size."""
        return self.average_gbits[-1]


def parse_ib_write_bw(text: str) -> IbRun:
    fields: dict[str, str] = {}
    unit, rows = None, []
    for line in text.splitlines():
        for part in line.split("\t"):
            found = _IB_FIELD_RE.match(part)
            if found and found.group(1) not in fields:
                fields[found.group(1)] = found.group(2)
        header = _IB_HEADER_RE.search(line)
        if header:
            unit = header.group("unit")
            continue
        words = line.split()
        if unit and len(words) >= 5 and words[0].isdigit() and words[1].isdigit():
            try:
                rows.append((int(words[0]), float(words[3])))
            except ValueError:
                continue
    if unit is None or not rows:
        raise ToolOutputError("ib_write_bw printed no result table (#bytes #iterations BW peak "
                              "BW average MsgRate): see its output for why")
    scale = 1.0 if unit == "Gb" else _MIB_TO_GBIT
    rows.sort()
    return IbRun(device=fields.get("Device", ""), link_type=fields.get("Link type", ""),
                 sizes=tuple(size for size, _ in rows),
                 average_gbits=tuple(round(avg * scale, 3) for _, avg in rows))


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    gpu: int | None  # None: a result for the node, not one GPU (3.x Deployment checks)
    status: str  # Pass, Skip or Fail
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class DcgmRun:
    version: str
    results: tuple[DcgmResult, ...]

    @property
    def failures(self) -> list[str]:
        """One line per failed result: "<test> GPU <n>: <first warning>"."""
        out = []
        for r in self.results:
            if r.status == "Fail":
                where = f" GPU {r.gpu}" if r.gpu is not None else ""
                said = f": {r.warnings[0]}" if r.warnings else ""
                out.append(f"{r.test}{where}{said}")
        return out


def _gpu(result: dict) -> int | None:
    for name in ("entity_id", "gpu_id"):
        if name in result:
            try:
                return int(result[name])
            except (TypeError, ValueError):
                return None
    return None


def _warnings(result: dict) -> tuple[str, ...]:
    out = []
    for w in result.get("warnings") or []:
        if isinstance(w, dict):
            out.append(str(w.get("warning") or w.get("warnings") or ""))
        else:
            out.append(str(w))
    return tuple(" ".join(w.split()) for w in out if w)


def parse_dcgmi_diag(text: str) -> DcgmRun:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ToolOutputError(f"dcgmi diag -j printed no JSON document ({exc})") from None
    if not isinstance(doc, dict):
        raise ToolOutputError("dcgmi diag -j printed JSON that is not an object")
    if "iterations" in doc and isinstance(doc["iterations"], list) and doc["iterations"]:
        doc = doc["iterations"][-1]
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        raise ToolOutputError('dcgmi diag -j: neither "DCGM Diagnostic" (DCGM 4) nor '
                              '"DCGM GPU Diagnostic" (DCGM 3) in its output')
    if body.get("runtime_error"):
        raise ToolOutputError(f"dcgmi diag could not run: {body['runtime_error']}")
    version = str((doc.get("metadata") or {}).get("version") or doc.get("version")
                  or body.get("version") or "")
    results = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            for result in test.get("results") or []:
                results.append(DcgmResult(
                    category=str(category.get("category", "")), test=str(test.get("name", "")),
                    gpu=_gpu(result), status=str(result.get("status", "")),
                    warnings=_warnings(result)))
    if not results:
        raise ToolOutputError("dcgmi diag -j reported no test results")
    return DcgmRun(version=version, results=tuple(results))


# ---- metalslurm-health --json (roles/slurm_health): the GPU state before and after the load ---

# The health checker's checks of the GPUs' state: device files, count and type, uncorrected
# ECC errors, row remapping (failed, pending, unrepairable memory), critical Xids.
HEALTH_CHECKS = ("gpu_devices", "gpus", "gpu_xid")


@dataclass(frozen=True)
class HealthRun:
    failures: tuple[str, ...]  # "gpu_rows: 00000000:5D:00.0 has a remap ... pending", ...
    checked: int  # results that ran (not skipped)


def parse_health_json(text: str) -> HealthRun:
    """``metalslurm-health --json``: its results, the failed ones as "check: detail"."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ToolOutputError(f"metalslurm-health --json printed no JSON document ({exc})"
                              ) from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) and "check" in r
                                                 for r in results):
        raise ToolOutputError("metalslurm-health --json printed no list of results")
    failures = tuple(f"{r['check']}: {r.get('detail', '')}" for r in results
                     if not r.get("ok", False))
    return HealthRun(failures, sum(1 for r in results if not r.get("skipped")))
