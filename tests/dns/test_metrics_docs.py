"""docs/operations.md lists what `feddns serve` exports on /metrics, and its alerts use only that."""

import re
import urllib.request
from pathlib import Path

from harness.serve import ServeProcess

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SERVE_PREFIXES = ("feddns_dns_", "feddns_records_", "feddns_etcd_", "feddns_ready")


def exported(etcd_url: str | None = None) -> dict[str, str]:
    """Metric family name -> type, from a running serve's /metrics: serving the example, and, with
    ``etcd_url``, serving etcd (the families only a store in etcd has: ``feddns_etcd_leader``)."""
    text = _scrape(ServeProcess(example=True, extra_args=["--metrics", "127.0.0.1:0"]))
    if etcd_url is not None:
        text += _scrape(ServeProcess(etcd_url=etcd_url, prefix="/metricsdocs",
                                     extra_args=["--metrics", "127.0.0.1:0"]))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    names = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.match(r"[a-zA-Z_:]+", line).group(0)
            family = name.removesuffix("_total").removesuffix("_created")
            names[name] = types.get(family, types.get(name, "?"))
    return names


def _scrape(process: ServeProcess) -> str:
    with process as server:
        server.query("myservice.myns.myfederation.svc.federation.", cluster="foo")
        server.query("nosuch.federation.")
        with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=5) as reply:
            return reply.read().decode()


def test_operations_lists_every_serve_metric_with_its_type_and_uses_no_other(etcd):
    names = exported(etcd.url)
    assert all(n.startswith("feddns_") for n in names)
    text = OPERATIONS.read_text()
    section = text[text.index("## Metrics to watch") : text.index("`feddns controller` (port 9154)")]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(feddns_[a-z_]+)` \| (\w+) \|", section, re.MULTILINE)}
    assert set(rows) == set(names), "docs/operations.md and /metrics differ"
    for name, kind in rows.items():
        assert kind == names[name], (name, kind, names[name])
    mentioned = set(re.findall(r"feddns_[a-z_]+", text))
    serve_mentioned = {n for n in mentioned if n.startswith(SERVE_PREFIXES)}
    assert serve_mentioned <= set(names), serve_mentioned - set(names)
