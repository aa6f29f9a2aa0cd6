"""bench/open_index.py runs end to end on a small size and prints every format's figures (no timing is asserted);
its msprobe dump is one nbprec reads whole, through the C scanner, with the statistics it was written with."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
from bench_support import BENCH, bench_module

import nbprec
from nbprec.formats.msprobe_scan import _scan, scan_dump_json


def test_open_index_prints_every_format():
    proc = subprocess.run([sys.executable, str(BENCH / "open_index.py"), "--tensors", "3000", "--repeat", "5"],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for label in ("nbprec, small payloads", "nbprec, large payloads", "nbprec, small, index.jsonl only"):
        assert re.search(re.escape(label) + r".*\| ratio +[0-9.]+x \| (ok|OVER TARGET)$", out, re.MULTILINE), out
    for label in ("tf_npy (format given)", "tf_npy (format guessed, all probes)", "cann (format given)"):
        assert re.search(re.escape(label) + r".*\| ratio +[0-9.]+x \| no target$", out, re.MULTILINE), out
    line = re.search(r"msprobe \(format given\) +json\.loads of dump\.json +([0-9.]+) s \| open +(\d+) tensors", out)
    assert line and int(line[2]) == 3000, out
    assert len(re.findall(r"run \d+: json\.loads [0-9.]+ s, open", out)) == 5


def test_the_msprobe_dump_is_read_whole_with_its_statistics(tmp_path):
    rank = bench_module("open_index").build_msprobe(tmp_path / "run", 1000)
    dump = nbprec.open(tmp_path / "run", format="msprobe")
    assert len(dump) == 1000 and dump.problems.empty
    if _scan is not None:
        assert scan_dump_json(rank / "dump.json") is not None
    written = json.loads((rank / "dump.json").read_text())["data"]
    table = dump.index.set_index("name")
    for op, entry in list(written.items())[:40]:
        for section, role in (("input_args", "input"), ("input", "input"), ("output", "output")):
            for slot, tensor in enumerate(entry.get(section, [])):
                row = table.loc[f"{op}.{role}.{slot}"]
                assert (row["min"], row["max"], row["mean"]) == (tensor["Min"], tensor["Max"], tensor["Mean"])
                assert np.float32(tensor["Max"]) == tensor["Max"]  # float32 values, written as msprobe writes them
