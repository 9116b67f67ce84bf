"""The Summary of every sample and shared run, in a compact form that a refactor must leave unchanged.

A golden file per run (``tests/golden/<run>.json``) holds ``Summary.to_dict()`` with every event table but the graph (``EVENT_TABLES_KEPT``), and the run folder's path replaced
by ``<run>``. Small tables and everything else are kept whole; a table over ``WHOLE_ROWS`` rows is kept as its row
count, column names, per-column sums and a digest of its values rounded to ``DIGITS`` significant digits, so that a
change names the table and column it touched while the files stay small.

    python -m tests.golden_summary            # rewrite the golden files from the current code
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SYNTHETIC = ROOT / "tests" / "golden_runs"
SHARED_HTA = ROOT.parent / "shared" / "traces" / "hta"
WHOLE_ROWS = 40
# Every table but the graph (its rows are the critical path's and the replays' input, checked through them).
EVENT_TABLES_KEPT = ("gaps", "critical_path_events", "ops_by_shape", "op_steps", "memory_timeline")
DIGITS = 6


def runs() -> list[Path]:
    """Every bundled sample run, every synthetic GPU run (``tests/golden_runs``: what no real trace here exercises, made
    by ``python -m tests.golden_runs.make``) and every shared HTA run."""
    samples = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir())
    synthetic = sorted(p for p in SYNTHETIC.iterdir() if p.is_dir() and p.name != "__pycache__")
    shared = sorted(p for p in SHARED_HTA.iterdir() if p.is_dir()) if SHARED_HTA.is_dir() else []
    return samples + synthetic + shared


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _table(records: list[dict]) -> dict | list:
    if len(records) <= WHOLE_ROWS:
        return records
    columns = list(records[0])
    sums = {}
    for c in columns:
        numbers = [r[c] for r in records if isinstance(r[c], (int, float)) and not isinstance(r[c], bool)]
        if numbers:
            sums[c] = _rounded(float(math.fsum(numbers)))
    text = json.dumps(_rounded(records), sort_keys=True, separators=(",", ":"))
    return {"rows": len(records), "columns": columns, "sums": sums,
            "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _relative(value, run: str):
    if isinstance(value, str):
        return value.replace(run, "<run>")
    if isinstance(value, dict):
        return {k: _relative(v, run) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, run) for v in value]
    return value


def compact(summary, run: Path) -> dict:
    """The golden form of one run's Summary."""
    plain = _relative(summary.to_dict(tables=EVENT_TABLES_KEPT), str(run))
    return {k: (_table(v) if k not in ("run", "findings") else v) for k, v in plain.items()}


OPTIONS = dict(workers=1, cache=False)  # tracekit.summarize's options for a golden Summary


def summarize(run: Path) -> dict:
    import tracekit

    return compact(tracekit.summarize(run, **OPTIONS), run)


def differences(expected, actual, where: str = "") -> list[str]:
    """Where two golden forms differ: paths to the first few mismatches (floats equal to 1e-9 relative)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}.{k}: missing" for k in expected if k not in actual]
        out += [f"{where}.{k}: new" for k in actual if k not in expected]
        for k in expected:
            if k in actual:
                out += differences(expected[k], actual[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items, now {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        if math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-9):
            return []
    elif expected == actual:
        return []
    return [f"{where}: {expected!r}, now {actual!r}"]


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    for run in runs():
        path = GOLDEN / f"{run.name}.json"
        path.write_text(json.dumps(summarize(run), indent=1, sort_keys=True) + "\n")
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
