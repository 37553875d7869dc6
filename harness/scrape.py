"""One sample of a process's Prometheus ``/metrics``, as the tests and benchmarks read it."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def unlabelled_sample(port: int, name: str) -> float:
    """The value of the sample ``name`` with no labels at ``http://127.0.0.1:PORT/metrics``;
    raises ``KeyError`` when there is none."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    raise KeyError(name)
