"""bench/serve_qps.py still runs against feddns, NSD and the fixed server, and prints its table.

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
    for label in FILES:  # q/s and CPU per query of feddns and NSD, then the ratios to feddns exact and to NSD
        row = rf"^{re.escape(label)}\s+{NUMBER}\s+[\d.]+\s+{NUMBER}\s+[\d.]+\s+{RATIO}\s+{RATIO}$"
        assert re.search(row, out, re.MULTILINE), (label, out)
    assert re.search(rf"^fixed server\s+{NUMBER}\s+[\d.]+\s+\(exact-repeat file\)$", out, re.MULTILINE), out
    for target in ("0x20 case >= 0.8 x exact", "random names >= 0.6 x exact", "2,000 services >= 0.8 x exact",
                   "exact >= 0.95 x fixed server", "weighted q/s >= exact / 1.5", "weighted CPU <= 1.5 x exact"):
        assert re.search(rf"^target {re.escape(target)}\s+{RATIO}\s+(met|NOT MET)$", out, re.MULTILINE), target
    assert re.search(rf"^weighted / exact CPU per query: {RATIO}$", out, re.MULTILINE)
    assert re.search(rf"^feddns exact / NSD exact: {RATIO}$", out, re.MULTILINE)
    for server in ("feddns", "nsd"):
        for label in FILES:
            rcode = "NXDOMAIN" if label == "nxdomain" else "NOERROR"
            line = re.search(rf"^\s+{server}\s+{re.escape(label)}\s.*lost \d+\s+rcodes (.*)$", run.stderr, re.MULTILINE)
            assert line and re.fullmatch(rf"{rcode} \d+", line.group(1)), (server, label, line and line.group(0))
