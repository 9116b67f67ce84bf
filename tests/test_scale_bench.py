"""``benchmarks/scale.py``'s measured processes: each floor decodes every event of every file, and each run reports
its whole-process time (start-up and imports included) beside its time after imports."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
scale = pytest.importorskip("scale")  # psutil: an optional dependency of the benchmarks

RUN = ROOT / "sample_traces" / "gpt-gloo-2rank"


def _events_in(folder: Path) -> int:
    total = 0
    for path in sorted(folder.glob("*.json*")):
        data = path.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        total += len(json.loads(data).get("traceEvents", []))  # run.json holds none
    return total


@pytest.mark.parametrize("floor", ["FLOOR", "LEAN_FLOOR"])
def test_each_floor_decodes_every_event_and_times_the_whole_process(floor):
    result = scale.measure(getattr(scale, floor), {"dir": str(RUN)})
    assert result["events"] == _events_in(RUN) > 1000
    assert result["process_s"] > result["wall_s"] > 0 and result["cpu_s"] > 0


def test_the_lean_floor_is_a_different_decoder():
    assert "msgspec.Raw" in scale.LEAN_FLOOR and "kineto" not in scale.LEAN_FLOOR.split("import msgspec")[1]
    assert "tracekit/read/kineto.py" in scale.FLOOR and "import tracekit" not in scale.FLOOR


def test_the_streamed_floor_decodes_every_event_of_its_file(tmp_path):
    # One file: a large trace's folder holds one. Its events are those of the whole document, a chunk at a time.
    source = RUN / "rank-0.pt.trace.json.gz"
    (tmp_path / source.name).write_bytes(source.read_bytes())
    result = scale.measure(scale.STREAMED_FLOOR, {"dir": str(tmp_path), "chunk_events": 1000})  # 7 chunks
    assert result["events"] == _events_in(tmp_path) > 1000
    assert result["process_s"] > result["wall_s"] > 0 and result["cpu_s"] > 0
