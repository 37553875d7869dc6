"""The skydns backend's modules: each store is loaded only when chosen.

``stubzone.backends.skydns`` (the factory), ``skydns_layout`` (keys and values),
``skydns_etcd2`` (v2 over aiohttp's client) and ``skydns_etcd3`` (v3 over aetcd and
gRPC). Each case runs in a fresh interpreter, where nothing else has loaded a client yet.
"""

import subprocess
import sys

import pytest

MAKE = (
    "import argparse\n"
    "from stubzone.backends import skydns\n"
    "from stubzone.model import StubDomains\n"
    "args = argparse.Namespace(etcd=None, etcd_prefix=None, backend_timeout=5.0, skydns_etcd_api={api!r},\n"
    "                          etcd_cacert=None, etcd_cert=None, etcd_key=None, etcd_user=None,\n"
    "                          etcd_password_file=None)\n"
    "print(type(skydns.make(args, StubDomains())).__name__)\n"
)
LOADED = "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'aetcd', 'grpc'}))\n"


def loaded_after(script: str) -> list[str]:
    """The lines ``script`` prints, run in a fresh interpreter (``sys`` imported first)."""
    result = subprocess.run([sys.executable, "-c", "import sys\n" + script], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_v3_store_does_not_import_aiohttp():
    """Importing the v3 backend loads aetcd and gRPC, and not aiohttp (the v2 store's HTTP client)."""
    assert loaded_after("import stubzone.backends.skydns_etcd3\n" + LOADED) == ["['aetcd', 'grpc']"]


@pytest.mark.parametrize(("api", "store", "loaded"), [
    ("v3", "SkyDNSEtcd3", "['aetcd', 'grpc']"),
    ("v2", "SkyDNSEtcd2", "['aiohttp']"),
])
def test_the_factory_imports_the_chosen_store_only(api: str, store: str, loaded: str):
    """``--skydns-etcd-api v3`` makes the v3 store without aiohttp; v2 makes the v2 store without gRPC."""
    assert loaded_after(MAKE.format(api=api) + LOADED) == [store, loaded]


def test_the_layout_imports_no_client():
    """The keys and values alone need neither etcd client."""
    assert loaded_after("import stubzone.backends.skydns_layout\n" + LOADED) == ["[]"]
