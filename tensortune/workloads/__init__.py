"""Reference operator shapes shipped with the package (from the AutoTVM paper's experiments)."""
from __future__ import annotations

import csv
from importlib import resources

from ..errors import TensortuneError

#: table name -> CSV file shipped in this package
TABLES = {"resnet18": "resnet18_conv2d.csv", "mobilenet": "mobilenet_depthwise.csv"}


class WorkloadError(TensortuneError, KeyError):
    """An unknown workload table or row."""

    def __str__(self) -> str:
        return str(self.args[0])


def load(table: str) -> dict[str, dict[str, int]]:
    """Rows of a workload table, keyed by name (``C1``..``C12`` or ``D1``..``D9``), with integer fields."""
    if table not in TABLES:
        raise WorkloadError(f"unknown workload table '{table}'; known tables are {sorted(TABLES)}")
    text = resources.files(__package__).joinpath(TABLES[table]).read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    rows = {}
    for r in csv.DictReader(lines):
        rows[r["name"]] = {k: int(v) for k, v in r.items() if k != "name"}
    return rows


def get(key: str) -> dict[str, int]:
    """One row by ``table:name``, for example ``resnet18:C6``."""
    table, _, name = key.partition(":")
    rows = load(table)
    if name not in rows:
        raise WorkloadError(f"no workload '{name}' in table '{table}'; choose one of {list(rows)}")
    return rows[name]
