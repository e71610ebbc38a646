"""GPU-hours per user and account from ``sacct``, and a chargeback table from a price list.

The work is a pure function of sacct's text (``usage_from_sacct``), so it is tested with
recorded output; getting that text (locally, over Ansible, from the local cluster, or from a
file) is a thin transport around it.

Counting rules:
- One record per job allocation (``--allocations``: steps would count the same GPUs again) and
  one per run of a requeued job (``--duplicates``: without it sacct shows only the last run, and
  the GPU time of a preempted run would go unbilled).
- A record's run time is clipped to the window. A running job (End=Unknown) ends at
  Start + ElapsedRaw, which sacct computes when it is asked, so no clock is needed here.
- GPUs come from AllocTRES: the typed entries (``gres/gpu:h100=8``) when present, otherwise the
  untyped total (``gres/gpu=8``). Slurm lists both for a typed request; counting both would
  double the hours.
- GPU-hours = GPUs x seconds inside the window / 3600. Prices are per GPU-hour and per GPU
  type; ``default`` prices GPUs whose type sacct does not name.

``metalslurm report usage`` (:func:`usage`) checks every input, then gets sacct's text from
where it is told and prints the table.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from infra.ops.inventory_file import hosts_in_group
from infra.ops.local import local_stack
from infra.stack.inputs import (
    InputError,
    load_yaml_mapping,
    parse_key_value,
    parse_number,
    read_text_argument,
)

SACCT_FIELDS = ("JobID", "User", "Account", "Partition", "State", "Start", "End", "Elapsed",
                "ElapsedRaw", "AllocTRES", "NNodes")
UNSET_TIMES = frozenset({"", "Unknown", "None", "N/A"})
DEFAULT_PRICE_KEY = "default"
# What a recorded sacct output (--from-file) must be.
SACCT_OUTPUT = ("sacct's output with --parsable2 --noheader --format=" + ",".join(SACCT_FIELDS)
                + " (add --allusers --duplicates --allocations and the window)")
_GPU_TRES_RE = re.compile(r"^gres/gpu(?::(?P<type>[^=]+))?$")
_RELATIVE_RE = re.compile(r"^now(?:(?P<sign>[-+])(?P<n>\d+)(?P<unit>seconds|minutes|hours|days|"
                          r"weeks|second|minute|hour|day|week|s|m|h|d|w)?)?$")


# A problem with the report's input, naming where it came from (``--start``, ``--price``,
# ``--from-file``, sacct on the controller) in a sentence the operator can act on: the
# InputError every metalslurm command raises for bad input, under the name this module's
# callers know.
ReportError = InputError


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    user: str
    account: str
    partition: str
    state: str
    start: datetime | None
    end: datetime | None  # None while the job runs (End=Unknown)
    elapsed_raw: int
    gpus: Mapping[str | None, int]  # GPU type (None: untyped) -> count

    def seconds_in(self, window_start: datetime, window_end: datetime) -> int:
        if self.start is None:
            return 0  # never started: pending, or cancelled while pending
        try:
            end = self.end if self.end is not None else self.start + timedelta(
                seconds=self.elapsed_raw)
        except OverflowError:  # runs past year 9999: to the end of any window
            end = datetime.max
        overlap = (min(end, window_end) - max(self.start, window_start)).total_seconds()
        return max(0, int(overlap))


@dataclass(frozen=True)
class UsageRow:
    account: str
    user: str
    gpu_type: str | None
    jobs: int
    gpu_seconds: int

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


def sacct_command(start: datetime, end: datetime) -> list[str]:
    return ["sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
            f"--starttime={start:%Y-%m-%dT%H:%M:%S}", f"--endtime={end:%Y-%m-%dT%H:%M:%S}",
            "--format=" + ",".join(SACCT_FIELDS)]


def gpus_from_tres(tres: str) -> dict[str | None, int]:
    """``billing=16,cpu=16,gres/gpu:h100=2,gres/gpu=2,mem=64G,node=1`` -> ``{'h100': 2}``."""
    typed: dict[str | None, int] = {}
    untyped = 0
    for item in tres.split(","):
        name, _, value = item.partition("=")
        m = _GPU_TRES_RE.match(name.strip())
        if not m or not value.strip().isdigit():
            continue
        if m.group("type"):
            gpu_type = m.group("type").lower()
            typed[gpu_type] = typed.get(gpu_type, 0) + int(value)
        else:
            untyped += int(value)
    if typed:
        return typed
    return {None: untyped} if untyped else {}


def _sacct_time(text: str, source: str, number: int) -> datetime | None:
    text = text.strip()
    if text in UNSET_TIMES:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is not None:
        raise ReportError(source, f"sacct line {number}: time {text!r} is not "
                          "YYYY-MM-DDTHH:MM:SS; give {SACCT_OUTPUT}")
    return value


def parse_sacct(text: str, source: str = "sacct output") -> list[JobRecord]:
    """The job records of sacct's output (:func:`sacct_command`); ``source`` names where the
    text came from in a :class:`ReportError`."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            raise ReportError(source, f"sacct line {number} has {len(parts)} fields, expected "
                              f"{len(SACCT_FIELDS)} ({','.join(SACCT_FIELDS)}): {line[:200]!r}; "
                              f"give {SACCT_OUTPUT}")
        row = dict(zip(SACCT_FIELDS, parts, strict=True))
        if "." in row["JobID"]:
            continue  # a step (.batch, .extern, .0): its GPUs belong to the allocation
        elapsed = row["ElapsedRaw"].strip() or "0"
        if not elapsed.isdecimal() or len(elapsed) > 12:
            raise ReportError(source, f"sacct line {number}: ElapsedRaw {elapsed!r} is not a "
                              f"number of seconds; give {SACCT_OUTPUT}")
        records.append(JobRecord(
            job_id=row["JobID"], user=row["User"], account=row["Account"],
            partition=row["Partition"], state=row["State"].split(" ")[0],
            start=_sacct_time(row["Start"], source, number),
            end=_sacct_time(row["End"], source, number),
            elapsed_raw=int(elapsed), gpus=gpus_from_tres(row["AllocTRES"])))
    return records


def aggregate(records: Iterable[JobRecord], window_start: datetime, window_end: datetime
              ) -> list[UsageRow]:
    totals: dict[tuple[str, str, str | None], list[int]] = {}
    for job in records:
        seconds = job.seconds_in(window_start, window_end)
        if not seconds:
            continue
        for gpu_type, count in job.gpus.items():
            if count <= 0:
                continue
            entry = totals.setdefault((job.account, job.user, gpu_type), [0, 0])
            entry[0] += 1
            entry[1] += count * seconds
    return [UsageRow(a, u, t, jobs, secs)
            for (a, u, t), (jobs, secs) in sorted(totals.items(),
                                                   key=lambda kv: (kv[0][0], kv[0][1],
                                                                   kv[0][2] or ""))]


def usage_from_sacct(text: str, window_start: datetime, window_end: datetime,
                     source: str = "sacct output") -> list[UsageRow]:
    return aggregate(parse_sacct(text, source), window_start, window_end)


# ---------------------------------------------------------------- prices

PRICE_FILE = "a YAML mapping of GPU type to price per GPU-hour, e.g. 'h100: 4.21'"


def parse_prices(items: Iterable[str], price_file: Path | None = None) -> dict[str, float]:
    """``h100=4.21`` items (``--price``) over a YAML mapping file (``--prices``,
    ``{h100: 4.21, default: 2.0}``)."""
    prices: dict[str, float] = {}
    if price_file is not None:
        data = load_yaml_mapping(price_file, "--prices", PRICE_FILE)
        for key, value in data.items():
            if not isinstance(key, str) or not key.strip():
                raise ReportError("--prices", f"{key!r} is not a GPU type; give {PRICE_FILE}",
                                  price_file)
            prices[key.strip().lower()] = parse_number(
                value, "--prices", f"a price per GPU-hour for {key}, such as 4.21",
                f"{price_file} ({key})")
    for item in items:
        key, value = parse_key_value(item, "--price", "TYPE=PRICE",
                                     f"h100=4.21 (or {DEFAULT_PRICE_KEY}=2.00)")
        prices[key.lower()] = parse_number(value, "--price", "a price per GPU-hour such as "
                                           "4.21", repr(item))
    return prices


def price_for(gpu_type: str | None, prices: Mapping[str, float]) -> float | None:
    if gpu_type is not None and gpu_type in prices:
        return prices[gpu_type]
    return prices.get(DEFAULT_PRICE_KEY)


# ---------------------------------------------------------------- output

def _table_rows(rows: list[UsageRow], prices: Mapping[str, float] | None
                ) -> list[dict[str, str]]:
    """Detail rows, then a total per account, then the grand total (scope column says which)."""
    out: list[dict[str, str]] = []

    def line(scope: str, account: str, user: str, gpu_type: str, jobs: int, seconds: int,
             price: float | None, cost: float | None) -> dict[str, str]:
        return {"scope": scope, "account": account, "user": user, "gpu_type": gpu_type,
                "jobs": str(jobs), "gpu_hours": f"{seconds / 3600:.2f}",
                "gpu_seconds": str(seconds),
                "price_per_gpu_hour": "" if price is None else f"{price:.2f}",
                "cost": "" if cost is None else f"{cost:.2f}"}

    def cost_of(selected: list[UsageRow]) -> float | None:
        if prices is None:
            return None
        costs = [price_for(r.gpu_type, prices) for r in selected]
        if any(c is None for c in costs):
            return None
        return sum(r.gpu_hours * (c or 0.0) for r, c in zip(selected, costs, strict=True))

    for r in rows:
        price = price_for(r.gpu_type, prices) if prices is not None else None
        out.append(line("user", r.account, r.user, r.gpu_type or "(untyped)", r.jobs,
                        r.gpu_seconds, price, cost_of([r])))
    for account in sorted({r.account for r in rows}):
        selected = [r for r in rows if r.account == account]
        out.append(line("account", account, "", "", sum(r.jobs for r in selected),
                        sum(r.gpu_seconds for r in selected), None, cost_of(selected)))
    out.append(line("total", "", "", "", sum(r.jobs for r in rows),
                    sum(r.gpu_seconds for r in rows), None, cost_of(rows)))
    return out


def format_csv(rows: list[UsageRow], prices: Mapping[str, float] | None) -> str:
    buffer = io.StringIO()
    # gpu_seconds is exact (sacct counts whole seconds); gpu_hours is rounded for reading.
    columns = ["scope", "account", "user", "gpu_type", "jobs", "gpu_hours", "gpu_seconds"]
    if prices is not None:
        columns += ["price_per_gpu_hour", "cost"]
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(_table_rows(rows, prices))
    return buffer.getvalue()


def format_text(rows: list[UsageRow], prices: Mapping[str, float] | None,
                window_start: datetime, window_end: datetime) -> str:
    table = _table_rows(rows, prices)
    columns = [("account", "account"), ("user", "user"), ("gpu_type", "gpu"),
               ("jobs", "jobs"), ("gpu_hours", "GPU-hours")]
    if prices is not None:
        columns += [("price_per_gpu_hour", "$/GPU-h"), ("cost", "cost $")]
    display = []
    for row in table:
        shown = dict(row)
        if row["scope"] == "account":
            shown["user"] = "(account)"
        elif row["scope"] == "total":
            shown["account"] = "TOTAL"
        if prices is not None and row["cost"] == "":
            shown["cost"] = "no price"
        display.append(shown)
    widths = {key: max(len(title), *(len(r[key]) for r in display)) for key, title in columns}
    numeric = {"jobs", "gpu_hours", "price_per_gpu_hour", "cost"}

    def fmt(values: Mapping[str, str]) -> str:
        return "  ".join(values[k].rjust(widths[k]) if k in numeric else values[k].ljust(widths[k])
                         for k, _ in columns).rstrip()

    lines = [f"GPU usage {window_start:%Y-%m-%d %H:%M:%S} to {window_end:%Y-%m-%d %H:%M:%S} "
             "(controller time)",
             fmt({k: t for k, t in columns})]
    lines += [fmt(r) for r in display]
    missing = sorted({r.gpu_type or "(untyped)" for r in rows
                      if prices is not None and price_for(r.gpu_type, prices) is None})
    if missing:
        lines.append(f"no price for: {', '.join(missing)} (add --price TYPE=PRICE or "
                     f"--price {DEFAULT_PRICE_KEY}=PRICE)")
    if not rows:
        lines.append("no GPU jobs ran in this window")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- time window

TIME_FORMS = "YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], now, now-7days, today"


def parse_time(text: str, now: datetime, argument: str = "time") -> datetime:
    """The Slurm time forms operators use: YYYY-MM-DD[THH:MM[:SS]], now[-N{unit}], today,
    midnight; in the controller's local time (no UTC offset). ``argument`` (``--start``)
    names the input in a :class:`ReportError`."""
    value = text.strip()
    low = value.lower()
    if low in ("today", "midnight"):
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    m = _RELATIVE_RE.match(low)
    if m:
        if not m.group("n"):
            return now.replace(microsecond=0)
        unit = (m.group("unit") or "seconds")[0]
        seconds = int(m.group("n")) * {"s": 1, "m": 60, "h": 3600, "d": 86400,
                                       "w": 604800}[unit]
        try:
            delta = timedelta(seconds=seconds)
            moved = now - delta if m.group("sign") == "-" else now + delta
        except OverflowError:
            raise ReportError(argument, f"{text!r} is outside the calendar (years 1 to 9999); "
                              f"give a time such as {TIME_FORMS}") from None
        return moved.replace(microsecond=0)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ReportError(argument, f"{text!r} is not a time: use {TIME_FORMS}") from None
    if parsed.tzinfo is not None:
        raise ReportError(argument, f"{text!r} has a UTC offset; give the controller's local "
                          "time without one (sacct reads times that way), e.g. "
                          f"{parsed:%Y-%m-%dT%H:%M}")
    return parsed


def default_window(now: datetime) -> tuple[datetime, datetime]:
    """This month so far."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now.replace(
        microsecond=0)


# ---------------------------------------------------------------- transports

def fetch_local(command: list[str]) -> str:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        hint = ("; run this on the controller, or give -i INVENTORY, --stack FILE or "
                "--from-file FILE") if command[0] == "sacct" else ""
        raise RuntimeError(f"{command[0]} is not installed on this machine{hint}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed (rc {proc.returncode}): "
                           f"{proc.stderr.strip()}")
    return proc.stdout


def fetch_ansible(command: list[str], inventory: Path, pattern: str = "slurm_controller"
                  ) -> str:
    """Run the command on the controller with an Ansible ad-hoc call; read the json callback."""
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    args = ["ansible", "-i", str(inventory), f"{pattern}[0]", "-m", "ansible.builtin.command",
            "-a", json.dumps({"argv": command})]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    try:
        hosts = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    except (ValueError, KeyError, IndexError):
        raise RuntimeError(f"ansible on {pattern} gave no result (rc {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[:500]}") from None
    for host, result in hosts.items():
        if result.get("failed") or result.get("unreachable") or result.get("rc", 0) != 0:
            raise RuntimeError(f"sacct on {host} failed: "
                               f"{(result.get('stderr') or result.get('msg') or '').strip()}")
        return str(result.get("stdout", ""))
    raise RuntimeError(f"inventory {inventory} has no host in group {pattern}")


def fetch_podman(command: list[str], container: str) -> str:
    return fetch_local(["podman", "exec", container, *command])


def usage(*, start: str | None, end: str | None, price: list[str], prices: Path | None,
          from_file: Path | None, inventory: Path | None, stack: Path | None,
          as_csv: bool) -> int:
    """GPU-hours from sacct (a file, the inventory's controller, the local cluster's
    controller or this host), printed as a table or CSV, priced when prices are given."""
    now = datetime.now()
    window_start, window_end = default_window(now)
    if start:
        window_start = parse_time(start, now, "--start")
    if end:
        window_end = parse_time(end, now, "--end")
    if window_end <= window_start:
        raise InputError("--end", f"{window_end:%Y-%m-%dT%H:%M:%S} is not after --start "
                         f"{window_start:%Y-%m-%dT%H:%M:%S}; give a later --end or an earlier "
                         "--start")
    price_list = parse_prices(price, prices) if price or prices else None
    command = sacct_command(window_start, window_end)
    # Every input is checked above and here, before sacct runs anywhere.
    if from_file:
        text = read_text_argument(from_file, "--from-file", SACCT_OUTPUT,
                                  allow_empty=True)
        rows = usage_from_sacct(text, window_start, window_end,
                                       f"--from-file {from_file}")
    elif inventory:
        hosts_in_group(inventory, "slurm_controller")
        text = fetch_ansible(command, inventory)
        rows = usage_from_sacct(text, window_start, window_end,
                                       "sacct on the inventory's controller")
    elif stack:
        from infra.providers.local import container_name

        cfg = local_stack(stack, "--stack runs sacct on a local cluster's controller "
                          "(provider: local); for another cluster give -i INVENTORY")
        text = fetch_podman(command, container_name(cfg.cluster_name,
                                                           cfg.controller_name))
        rows = usage_from_sacct(text, window_start, window_end,
                                       "sacct on the local controller")
    else:
        rows = usage_from_sacct(fetch_local(command), window_start, window_end,
                                       "sacct")
    if as_csv:
        sys.stdout.write(format_csv(rows, price_list))
    else:
        sys.stdout.write(format_text(rows, price_list, window_start, window_end))
    return 0
