"""The old name of :mod:`feddns.store.etcdfeed`, until feddns/serve.py (being edited elsewhere) imports that."""

from feddns.store.etcdfeed import EtcdSource as EtcdSource  # noqa: PLC0414 - the old import path
