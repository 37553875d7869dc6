"""bench/serve_qps.py still runs against feddns, NSD, the fixed server and CoreDNS, and prints its table.

Not a timed test: it asserts nothing about speed, only that every row and ratio the
benchmark reports (docs/performance.md) is printed, and that dnsperf got the rcodes each
query file should get from each server.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = r"[\d,]+"
RATIO = r"\d+\.\d\d"
FILES = ("exact", "0x20", "nxdomain", "2000 services", "weighted")


def test_serve_qps_prints_every_row_and_ratio():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_qps.py"), "--seconds", "1", "--slice", "1",
                          "--rounds", "1", "--clients", "2"],
                         check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert re.search(r"^round 1 \(load average [\d.]+\)$", out, re.MULTILINE)
    for label in FILES:  # q/s and CPU per query of feddns, NSD, CoreDNS file and etcd, then six ratios
        figures = rf"\s+{NUMBER}\s+[\d.]+" * 4
        row = rf"^{re.escape(label)}{figures}" + rf"\s+{RATIO}" * 6 + "$"
        assert re.search(row, out, re.MULTILINE), (label, out)
    assert re.search(rf"^fixed server\s+{NUMBER}\s+[\d.]+\s+\(exact-repeat file\)$", out, re.MULTILINE), out
    assert re.search(rf"^fixed reader\s+{NUMBER}\s+[\d.]+\s+\(exact-repeat file, its own", out, re.MULTILINE), out
    assert re.search(rf"^fixed server / NSD exact: {RATIO} \(reader loop {RATIO}\)", out, re.MULTILINE), out
    for target in ("0x20 case >= 0.8 x exact", "random names >= 0.6 x exact", "2,000 services >= 0.8 x exact",
                   "exact >= 0.95 x fixed reader", "random names >= 0.9 x NSD", "weighted q/s >= exact / 1.5",
                   "weighted CPU <= 1.5 x exact",
                   *(f"{label} q/s >= CoreDNS file" for label in FILES),
                   *(f"{label} CPU/query <= CoreDNS file" for label in FILES)):
        assert re.search(rf"^target {re.escape(target)}\s+{RATIO}\s+(met|NOT MET)$", out, re.MULTILINE), target
    assert re.search(rf"^weighted / exact CPU per query: {RATIO}$", out, re.MULTILINE)
    assert re.search(rf"^feddns exact / NSD exact: {RATIO}$", out, re.MULTILINE)
    for server in ("feddns", "nsd", "coredns-file", "coredns-etcd"):
        for label in FILES:
            rcode = "NXDOMAIN" if label == "nxdomain" else "NOERROR"
            line = re.search(rf"^\s+{server}\s+{re.escape(label)}\s.*lost \d+\s+rcodes (.*)$", run.stderr, re.MULTILINE)
            assert line and re.fullmatch(rf"{rcode} \d+", line.group(1)), (server, label, line and line.group(0))


PER_SHARD_BUDGET = 3.5 * 1024
"""Bytes of controller peak RSS a shard may add. Measured by this test's two runs on
2026-11-25: 2.3 KiB a shard; the controller before c07fb33, which held each whole list as
JSON until the event loop shrank it, 4.7 KiB (at 100,000 shards: 309 against 843 MiB,
docs/controller.md "Memory")."""


def _controller_peak_rss(services: int) -> float:
    """Peak RSS in MiB of ``feddns controller`` syncing 2 fake clusters x ``services`` Services."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "controller_sync.py"), "--clusters", "2",
                          "--services", str(services), "--changes", "1"],
                         check=False, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    peak = re.search(r"^peak RSS \(MiB\)\s+([\d.]+)$", run.stdout, re.MULTILINE)
    assert peak, run.stdout
    return float(peak.group(1))


def test_controller_memory_grows_by_at_most_the_budget_per_shard():
    """bench/controller_sync.py at 200 and 8,000 shards: the controller's peak RSS grows by
    less than PER_SHARD_BUDGET a shard (each shard is a Service and its EndpointSlice)."""
    small, large = _controller_peak_rss(100), _controller_peak_rss(4000)
    per_shard = (large - small) * 2**20 / (2 * (4000 - 100))
    assert per_shard < PER_SHARD_BUDGET, f"{per_shard:.0f} bytes a shard ({small} -> {large} MiB)"


def test_every_bench_command_starts():
    """Each bench script with a command line (not the helper servers other scripts start)
    answers ``--help``: a harness it borrows from tests/ that moved breaks it here, not on
    the day someone measures."""
    scripts = [path for path in sorted((ROOT / "bench").glob("*.py")) if "argparse" in path.read_text()]
    assert len(scripts) >= 8
    runs = {path.name: subprocess.Popen([sys.executable, str(path), "--help"], cwd=ROOT, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for path in scripts}
    failed = {}
    for name, run in runs.items():
        out, err = run.communicate(timeout=120)
        if run.returncode != 0 or "usage:" not in out:
            failed[name] = err[-500:]
    assert not failed, failed


def test_https_lockout_prints_each_cases_figures():
    """bench/https_lockout.py for 1 s a case: one line of the good client's successes and p50, p99 and max
    for each of its three cases (the success rate itself is tests/stubzone/test_lockout.py's)."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "https_lockout.py"), "--seconds", "1"],
                         check=False, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    figures = r": (\d+) of (\d+) succeeded \([\d.]+ %\), p50 \d+ ms, p99 \d+ ms, max \d+ ms$"
    for case in ("stubzone POSTs, 300 heads from one address",
                 "stubzone POSTs, 300 heads from 32 addresses, one certificate",
                 "links reviews, 300 heads from one address"):
        line = re.search(f"^{re.escape(case)}{figures}", run.stdout, re.MULTILINE)
        assert line, (case, run.stdout)
        assert int(line.group(2)) >= 1 and int(line.group(1)) <= int(line.group(2)), line.group(0)


def test_differential_long_run_prints_what_it_compared():
    """bench/differential.py with no time left still runs one batch (one example of at most 2 steps) and
    prints how many examples, steps and questions it compared."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "differential.py"), "--minutes", "0", "--steps", "2",
                          "--questions", "5", "--batch", "1"],
                         check=False, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    line = re.fullmatch(r"\s*\d+ s: 1 examples, (\d+) steps, ([\d,]+) questions compared "
                        r"\(each of 3 servers, UDP and TCP\): no difference\n", run.stdout)
    assert line, run.stdout
    assert int(line.group(1)) >= 1 and int(line.group(2).replace(",", "")) >= 5, line.group(0)


def test_rolling_update_prints_every_stage_and_the_ratio():
    """bench/rolling_update.py on 5 Services (real kube-apiserver, etcd, controller, serve and
    CoreDNS) accounts for each of its 10 changes and prints each stage's row and the ratio.
    --step 2: a change overtaken by its Service's next write would have to take 2 s."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "rolling_update.py"), "--services", "5",
                          "--rate", "20", "--step", "2"],
                         check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    counts = re.search(r"^changes timed (\d+), overtaken (\d+), lost (\d+); load average [\d.]+ before, [\d.]+ after$",
                       out, re.MULTILINE)
    assert counts and sum(map(int, counts.groups())) == 10 and int(counts.group(1)) > 0, out
    timed = counts.group(1)
    for stage in ("API write -> controller's etcd write", "etcd write -> serve answer"):  # n: events the watch saw
        assert re.search(rf"^{re.escape(stage)}\s+\d+(\s+-?[\d.]+){{4}}$", out, re.MULTILINE), (stage, out)
    for stage in ("API write -> serve answer (feddns)", "API write -> CoreDNS answer"):
        assert re.search(rf"^{re.escape(stage)}\s+{timed}(\s+-?[\d.]+){{4}}$", out, re.MULTILINE), (stage, out)
    assert re.search(rf"^feddns / CoreDNS \(API write -> answer\): median {RATIO}, p99 {RATIO}$", out,
                     re.MULTILINE), out
