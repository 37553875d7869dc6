"""The records file of `feddns serve --records` (docs/serve.md): a bad one stops start-up with exit 2 and one
line naming the file, the etcd key, the line and the column."""

import subprocess
import sys
from pathlib import Path

import pytest

from feddns.keys import Layout
from feddns.store.file import read_records
from harness.serve import write_records

RECORDS = """\
/fed/_clusters/east: {zone: us-east-1a, region: us-east-1}
/fed/_clusters/west: {zone: us-west-2a, region: us-west-2}
/fed/prod/web/east:
  clusterIP: 10.0.0.1
  externalIP: 192.0.2.1
  ports: [{name: http, port: 80}]
/fed/prod/web/west:
  clusterIP: 10.1.0.1
  externalIP: 192.0.2.2
"""


@pytest.mark.parametrize(("old", "new", "words"), [
    # (a) a key twice: YAML alone would keep the last one without a word
    ("  clusterIP: 10.1.0.1\n", "  clusterIP: 10.1.0.1\n  clusterIP: 10.1.0.2\n",
     "line 9: duplicate key 'clusterIP' (column 3, first given on line 8)"),
    # (b) a misspelled field: etcd's reader would ignore it and serve the record without its address
    ("  clusterIP: 10.1.0.1\n", "  clusterIp: 10.1.0.1\n",
     "/fed/prod/web/west.clusterIp: unknown key (expected clusterIP, clusterIPs, externalIP, externalIPs, "
     "ports, ready, policy, failoverOrder, weight, noneReady, ttl, endpoints) (line 8, column 3)"),
    # (c) a YAML syntax error on line 7
    ("/fed/prod/web/west:\n", "/fed/prod/web/west: a: b\n",
     "not valid YAML: mapping values are not allowed here (line 7, column 22)"),
    # a value error: the line and column of its field
    ("  clusterIP: 10.1.0.1\n", "  clusterIP: 10.1.0.999\n",
     "/fed/prod/web/west: clusterIPs: '10.1.0.999' is not an IP address (line 8, column 3)"),
    ("port: 80}]\n", "port: 80, protocl: UDP}]\n",
     "/fed/prod/web/east.ports[0].protocl: unknown key (expected name, protocol, port) (line 6, column 34)"),
    # a key twice inside a JSON string value: json.loads alone would keep the last one; the string's line and column
    ("/fed/prod/web/west:\n",
     '/fed/prod/api/west: \'{"clusterIP": "10.1.0.5", "clusterIP": "10.1.0.6"}\'\n/fed/prod/web/west:\n',
     "/fed/prod/api/west: duplicate key 'clusterIP' in its JSON value (line 7, column 21)"),
    ("/fed/prod/web/west:\n", "/fed/prod/api/west: '{\"clusterIP\": \"10.1.0.5\"'\n/fed/prod/web/west:\n",
     "/fed/prod/api/west: value is not JSON: Expecting ',' delimiter at character 25 of the string "
     "(line 7, column 21)"),
    # a misspelled endpoint field is named, not hidden behind the value check's "ip None is not an IP address"
    ("  externalIP: 192.0.2.2\n", "  externalIP: 192.0.2.2\n  endpoints: [{hostname: a, adresses: [10.1.0.5]}]\n",
     "/fed/prod/web/west.endpoints[0].adresses: unknown key (expected ip, hostname) (line 10, column 29)"),
    # a key that is not a string, at its own line
    ("  externalIP: 192.0.2.2\n", "  externalIP: 192.0.2.2\n  3: x\n",
     "key 3 is not a string but an int (3) (line 10, column 3)"),
])
def test_a_bad_records_file_names_its_line_and_column(old, new, words):
    path = write_records(RECORDS.replace(old, new))
    result = subprocess.run([sys.executable, "-m", "feddns", "serve", "--listen", "127.0.0.1:0", "--records", path],
                            capture_output=True, text=True, timeout=20, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"feddns serve: error: records file {path}: {words}"], result.stderr


def test_the_file_the_cases_change_is_good():
    assert len(read_records(Path(write_records(RECORDS)), Layout())) == 4


def test_a_records_file_over_the_cap_is_refused_unread_naming_its_size_and_the_cap(tmp_path):
    """--max-records-size (16 MiB unless given): a file over it exits 2 before it is parsed."""
    path = tmp_path / "records.yaml"
    path.write_text(RECORDS + "#" * 4096 + "\n")
    size = path.stat().st_size
    result = subprocess.run([sys.executable, "-m", "feddns", "serve", "--listen", "127.0.0.1:0", "--workers", "1",
                             "--records", str(path), "--max-records-size", "4KiB"],
                            capture_output=True, text=True, timeout=20, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"feddns serve: error: records file {path}: {size:,} bytes, over the limit of 4,096 bytes "
        "(--max-records-size); not read"], result.stderr
