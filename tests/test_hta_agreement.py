"""Live agreement with HolisticTraceAnalysis on the real GPU traces: overlap % and idle % within 1 point, and
span, busy, compute and communication time in us within 1%.

HTA 0.5.0 rounds fractional-microsecond timestamps (start up, end down) before it measures; tracekit keeps the
nanoseconds. With that rounding switched off (HTA_DISABLE_NS_ROUNDING=1) the two agree to 0.01 points, which
shows the remaining difference is HTA's rounding and nothing else.
"""

import functools
import logging
import math
import re
from pathlib import Path

import pytest

import tracekit

hta_trace_analysis = pytest.importorskip("hta.trace_analysis")

HTA = Path(__file__).resolve().parents[2] / "shared" / "traces" / "hta"
GPU_TRACES = ["nccl_a100_2rank", "sampled_128rank", "ns_resolution_1rank", "alexnet_1gpu", "amd_mi250"]


def _analysis(trace_dir: Path):
    logging.getLogger("hta").setLevel(logging.ERROR)
    return hta_trace_analysis.TraceAnalysis(trace_dir=str(trace_dir))


@functools.cache
def _default_analysis(name: str):
    """One HTA parse per trace for the tests that use HTA's defaults (parsing is the slow part)."""
    return _analysis(HTA / name)


def _hta_numbers(trace_dir: Path, analysis=None) -> dict[int, tuple[float, float]]:
    analysis = analysis or _analysis(trace_dir)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    idle = dict(zip(temporal["rank"].astype(int), temporal["idle_time_pctg"].astype(float)))
    over = dict(zip(overlap["rank"].astype(int), overlap["comp_comm_overlap_pctg"].astype(float)))
    return {r: (idle[r], over.get(r, math.nan)) for r in idle}


def _close(a: float, b: float, tol: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_TRACES)
def test_idle_and_overlap_match_hta(name):
    ours = tracekit.summarize(HTA / name, cache=False).ranks.set_index("rank")
    theirs = _hta_numbers(HTA / name, _default_analysis(name))
    assert set(theirs) == set(ours.index)
    for rank, (idle_pct, overlap_pct) in theirs.items():
        assert _close(ours.loc[rank, "idle_pct"], idle_pct, 1.0), (rank, ours.loc[rank, "idle_pct"], idle_pct)
        assert _close(ours.loc[rank, "overlap_pct"], overlap_pct, 1.0), (rank, ours.loc[rank, "overlap_pct"], overlap_pct)


def _hta_times_us(analysis) -> dict[int, dict[str, float]]:
    """Per rank, HTA's own span, busy, compute and communication time (us): its temporal breakdown's kernel time
    (last kernel end - first start) and idle time, its merged computation kernels, and its communication kernels
    merged the way get_comm_comp_overlap merges them (HTA's parser, kernel types and interval merge)."""
    from hta.utils.utils import KernelType, get_kernel_type, merge_kernel_intervals  # noqa: PLC0415 - optional

    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    symbols = analysis.t.symbol_table.get_sym_table()
    out = {}
    for rank, frame in analysis.t.traces.items():
        kernels = frame[frame["stream"].ne(-1)].copy()
        types = kernels["name"].map(lambda i: get_kernel_type(symbols[i]))
        comm = merge_kernel_intervals(kernels[types.eq(KernelType.COMMUNICATION.name)].copy())
        row = temporal.loc[rank]
        out[int(rank)] = {"span_us": float(row["kernel_time(us)"]),
                          "busy_us": float(row["kernel_time(us)"] - row["idle_time(us)"]),
                          "compute_us": float(row["compute_time(us)"]),
                          "comm_us": float((comm["end"] - comm["ts"]).sum())}
    return out


@functools.cache
def _unrounded_analysis(name: str):
    """HTA's parse with its timestamp rounding off (HTA reads the switch while parsing)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HTA_DISABLE_NS_ROUNDING", "1")
        return _analysis(HTA / name)


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_TRACES)
def test_times_in_us_match_hta(name):
    # Against HTA's parse without its rounding of fractional-us timestamps: with it, HTA shortens every kernel by up
    # to 1 us, which on traces of short kernels moves busy and compute by more than 1% (amd_mi250: 131 against
    # 149 us busy) while the definitions agree exactly.
    ours = tracekit.summarize(HTA / name, cache=False).ranks.set_index("rank")
    theirs = _hta_times_us(_unrounded_analysis(name))
    assert set(theirs) == set(ours.index)
    for rank, times in theirs.items():
        for column, value in times.items():
            mine = float(ours.loc[rank, column])
            assert abs(mine - value) <= 0.01 * abs(value) + 1e-9, (rank, column, mine, value)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nccl_a100_2rank", "sampled_128rank", "ns_resolution_1rank"])
def test_the_residual_is_hta_rounding(name, monkeypatch):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    ours = tracekit.summarize(HTA / name, cache=False).ranks.set_index("rank")
    for rank, (idle_pct, overlap_pct) in _hta_numbers(HTA / name).items():
        assert _close(ours.loc[rank, "idle_pct"], idle_pct, 0.15), (rank, ours.loc[rank, "idle_pct"], idle_pct)
        assert _close(ours.loc[rank, "overlap_pct"], overlap_pct, 0.15), (rank, ours.loc[rank, "overlap_pct"], overlap_pct)


@pytest.mark.slow
def test_cpu_gloo_trace_works_where_hta_fails():
    with pytest.raises(Exception):
        hta_trace_analysis.TraceAnalysis(trace_dir=str(HTA / "cpu_only_gloo")).get_temporal_breakdown(visualize=False)
    ranks = tracekit.summarize(HTA / "cpu_only_gloo", cache=False).ranks
    assert ranks["rank"].tolist() == [34] and ranks["device"].tolist() == ["cpu"]
    assert ranks["allreduce_count"].iloc[0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_TRACES)
def test_kernel_breakdown_matches_hta(name):
    """summary.kernels against HTA's get_gpu_kernel_breakdown: per rank and kernel name, the sum, count, mean, min,
    max and std of durations, for every kernel that both call computation or communication (HTA lists only its
    top kernels by default, so the test asks it for all of them)."""
    analysis = _unrounded_analysis(name)
    _, theirs = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**6, duration_ratio=1.0,
                                                  include_memory_kernels=True)
    ours = tracekit.summarize(HTA / name, cache=False).kernels
    kind = {"COMPUTATION": "compute", "COMMUNICATION": "comm", "MEMORY": "memory"}
    compared = 0
    mine = ours.set_index(["rank", "name"])
    theirs = theirs.rename(columns={"sum (us)": "sum", "max (us)": "max", "min (us)": "min", "stddev": "std",
                                    "mean (us)": "mean"})
    for row in theirs.itertuples(index=False):
        key = (int(row.rank), row.name)
        if key not in mine.index:
            # HTA counts every GPU-side event with a stream, CUDA's sync markers too; tracekit only device work.
            assert re.search(r"Sync|Wait Event", row.name), key
            continue
        k = mine.loc[key]
        if k["kind"] != kind[row.kernel_type]:
            continue  # the two classify this name differently: not the same events
        calls = round(row.sum / row.mean) if row.mean else 0
        assert k["calls"] == calls, (key, k["calls"], calls)
        for ours_col, theirs_val in (("total_us", row.sum), ("mean_us", row.mean), ("min_us", row.min),
                                     ("max_us", row.max), ("std_us", row.std)):
            assert k[ours_col] == pytest.approx(theirs_val, rel=1e-6, abs=1e-6), (key, ours_col, k[ours_col])
        compared += 1
    syncs = theirs["name"].str.contains(r"Sync|Wait Event").sum()
    assert compared >= 0.9 * (len(theirs) - syncs) and compared > 0
