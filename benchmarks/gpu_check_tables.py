"""The GPU check's checks of tracekit's newer tables, each with its tolerance (a `gpu_check_verify.Check` each):

kernel table   summary.kernels' top TOP_KERNELS kernels by total_us, per rank: calls equal and total_us within
               KERNEL_REL_TOL (relative) of HolisticTraceAnalysis' get_gpu_kernel_breakdown, as
               tests/test_hta_agreement.py::test_kernel_breakdown_matches_hta compares them; a kernel the two
               classify differently (HTA's kernel_type against tracekit's kind) is not compared, as there.
FLOPs          every window step's summary.steps matmul_flops within FLOPS_TOL of run.json's
               flop_counter_flops_per_step (torch's FlopCounterMode, one optimizer step on one rank).
MFU            every rank's summary.ranks mfu_pct finite and in (0, 100], its device matched to a tracekit.devices
               entry (EXPECTED_ENTRIES: the entry a device name must match, 'NVIDIA H200' -> the H200 SXM).
memory         rank 0's largest summary.memory peak_allocated_bytes (CUDA rows: the profiled steps) within
               MEMORY_TOL of run.json's cuda_max_memory_allocated_bytes (torch.cuda.max_memory_allocated: the whole
               run, start-up and the FLOPs count after the loop included, so the trace's peak can only be lower).
prediction     tracekit.whatif(summary, ["baseline", "no_host_gaps"]) of the eager launch-bound run against the same
               step measured as a CUDA graph (benchmarks/gpu_check_graph.py): within PREDICTION_TOL.
On CPU ranks MFU and CUDA memory are not applicable (n/a, saying so); FLOPs and the memory table are read there too.
"""

from __future__ import annotations

import math

from gpu_check_verify import FAIL, NA, PASS, Check

TOP_KERNELS = 10
KERNEL_REL_TOL = 1e-6
FLOPS_TOL = 0.03
MEMORY_TOL = 0.02
PREDICTION_TOL = 0.30
MFU_PEAKS = ("bf16", "fp16", "tf32", "fp32")  # the dense peaks recorded beside each MFU
EXPECTED_ENTRIES = {"NVIDIA H200": "NVIDIA H200 SXM 141GB"}
_HTA_KIND = {"COMPUTATION": "compute", "COMMUNICATION": "comm", "MEMORY": "memory"}


def cpu_only(summary) -> bool:
    return bool(len(summary.ranks)) and bool((summary.ranks["device"] == "cpu").all())


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def _gb(x) -> str:
    return "unknown" if x is None or not math.isfinite(float(x)) else f"{float(x) / 1e9:.3f} GB"


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------- kernels

def check_kernel_table(summary, analysis, top: int = TOP_KERNELS) -> Check:
    """summary.kernels' top kernels per rank against HTA's kernel breakdown (`analysis`: verify.hta_analysis)."""
    if cpu_only(summary):
        return Check(NA, "not applicable on CPU: CPU-only traces have no kernels, and HTA reads GPU traces only")
    if isinstance(analysis, Exception):
        return Check(FAIL, f"HTA failed: {type(analysis).__name__}: {analysis}")
    try:
        _, theirs = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**6, duration_ratio=1.0,
                                                      include_memory_kernels=True)
    except Exception as e:
        return Check(FAIL, f"HTA's get_gpu_kernel_breakdown failed: {type(e).__name__}: {e}")
    ref = {(int(r["rank"]), r["name"]): r for r in theirs.to_dict("records")}
    k = summary.kernels
    problems, other_kind, compared, ranks = [], [], 0, 0
    for rank, rows in k[k["calls"] > 0].groupby("rank"):
        ranks += 1
        for row in rows.nlargest(top, "total_us").itertuples(index=False):
            h = ref.get((int(rank), row.name))
            if h is None:
                problems.append(f"r{rank} {_short(row.name)}: not in HTA's breakdown")
                continue
            if _HTA_KIND.get(h["kernel_type"]) != row.kind:
                other_kind.append(f"r{rank} {_short(row.name)} ({row.kind} vs HTA {h['kernel_type']})")
                continue
            calls = round(h["sum (us)"] / h["mean (us)"]) if h["mean (us)"] else 0
            if calls != row.calls or not math.isclose(row.total_us, h["sum (us)"], rel_tol=KERNEL_REL_TOL,
                                                      abs_tol=1e-6):
                problems.append(f"r{rank} {_short(row.name)}: {row.calls} calls {row.total_us:.3f} us vs HTA "
                                f"{calls} calls {h['sum (us)']:.3f} us")
            compared += 1
    if not compared and not problems:
        problems.append("no kernel compared" + (" (none in the window)" if not ranks else ""))
    kind_note = f"; not compared, classified differently: {', '.join(other_kind)}" if other_kind else ""
    tol = f"calls equal, total_us within {KERNEL_REL_TOL:g} relative"
    if problems:
        return Check(FAIL, f"{len(problems)} of the top {top} kernels differ ({tol}): " + "; ".join(problems[:6])
                     + kind_note, {"compared": compared})
    return Check(PASS, f"top {top} kernels of {ranks} rank(s), {compared} compared: {tol} of HTA's{kind_note}",
                 {"compared": compared})


# ------------------------------------------------------------------------------------------------ FLOPs

def check_flops(summary, run_json: dict) -> Check:
    """Each window step's matmul_flops within FLOPS_TOL of FlopCounterMode's count of one step."""
    ref = run_json.get("flop_counter_flops_per_step")
    if not _finite(ref) or ref <= 0:
        return Check(FAIL, f"run.json's flop_counter_flops_per_step is {ref!r}: nothing to compare")
    steps = summary.steps[summary.steps["in_window"].astype(bool)]
    if steps.empty:
        return Check(FAIL, "no window step in summary.steps")
    flops = steps["matmul_flops"].astype(float)
    rel = ((flops / ref) - 1).abs().fillna(math.inf)
    per_rank = steps.assign(f=flops).groupby("rank")["f"].mean()
    said = ", ".join(f"r{r} {v:.4g}" for r, v in per_rank.items())
    worst = float(rel.max())
    detail = (f"tracekit {said} vs FlopCounterMode {ref:.4g} FLOPs per step: max |diff| "
              f"{'unknown (NaN)' if math.isinf(worst) else f'{worst * 100:.2f}%'} over {len(steps)} window "
              f"rank-steps (tolerance {FLOPS_TOL * 100:g}%)")
    return Check(PASS if worst <= FLOPS_TOL else FAIL, detail,
                 {"flop_counter": ref, "tracekit": {int(r): float(v) for r, v in per_rank.items()}})


# -------------------------------------------------------------------------------------------------- MFU

def check_mfu(summary) -> Check:
    """mfu_pct finite on every GPU rank, from the datasheet entry its device name must match."""
    from tracekit import devices

    if cpu_only(summary):
        return Check(NA, "not applicable on CPU: CPU ranks have no datasheet peak, so mfu_pct is NaN by design")
    quality = summary.data_quality.set_index("rank")
    problems, mfu, entries = [], {}, {}
    for r in summary.ranks.itertuples(index=False):
        name = str(quality.loc[r.rank, "device_peaks"]) if r.rank in quality.index else ""
        entry = next((p for p in devices.PEAKS if p.name == name), None)
        want = EXPECTED_ENTRIES.get(r.device)
        if entry is None:
            problems.append(f"r{r.rank} {r.device!r} matched no tracekit.devices entry ({name or 'none'})")
        elif want and name != want:
            problems.append(f"r{r.rank} {r.device!r} matched {name}, not {want}")
        else:
            entries[name] = entry
        mfu[int(r.rank)] = float(r.mfu_pct)
        if not (math.isfinite(r.mfu_pct) and 0 < r.mfu_pct <= 100):
            problems.append(f"r{r.rank} mfu_pct {r.mfu_pct} (want finite, in (0, 100])")
    ops = getattr(summary, "ops", None)
    dtypes = sorted(ops.loc[ops["counted_flops"] > 0, "dtype"].dropna().astype(str).unique()) if ops is not None \
        and "counted_flops" in ops else []
    peaks = {n: {k: e.tflops.get(k) for k in MFU_PEAKS} for n, e in entries.items()}
    said_peaks = "; ".join(f"{n}: dense TFLOPS " + ", ".join(f"{k} {v:g}" for k, v in p.items() if v is not None)
                           for n, p in peaks.items())
    detail = (f"MFU {', '.join(f'r{r} {v:.2f}%' for r, v in mfu.items())}; {said_peaks or 'no entry'}; matmul "
              f"dtypes {', '.join(dtypes) or 'unknown'} (fp32 ops count against the fp32 peak: the trace does not "
              f"say whether they ran on TF32 tensor cores)")
    values = {"mfu_pct": mfu, "peaks": peaks, "dtypes": dtypes}
    return Check(FAIL, "; ".join(problems) + "; " + detail, values) if problems else Check(PASS, detail, values)


# ----------------------------------------------------------------------------------------------- memory

def check_memory(summary, run_json: dict) -> Check:
    """Rank 0's trace peak (summary.memory) against torch.cuda.max_memory_allocated from run.json."""
    mem = summary.memory
    if mem.empty:
        return Check(FAIL, "summary.memory is empty: the trace has no [memory] events (--profile-memory missing?)")
    peaks = mem.groupby(["rank", "device"])["peak_allocated_bytes"].max()
    said = ", ".join(f"r{r} {d} {_gb(v)}" for (r, d), v in peaks.items())
    ref = run_json.get("cuda_max_memory_allocated_bytes")
    values = {"trace_peak_bytes": {f"{r} {d}": float(v) for (r, d), v in peaks.items()}, "cuda_max_bytes": ref}
    if cpu_only(summary):
        return Check(NA, f"not applicable on CPU: run.json's cuda_max_memory_allocated_bytes is {ref!r} (CUDA only); "
                         f"the trace's memory table read: peak allocated {said}", values)
    cuda = mem[mem["device"].astype(str).str.startswith("cuda")]
    if cuda.empty:
        return Check(FAIL, f"no CUDA rows in summary.memory ({said})", values)
    if not _finite(ref) or ref <= 0:
        return Check(FAIL, f"run.json's cuda_max_memory_allocated_bytes is {ref!r}; trace: {said}", values)
    by_rank = cuda.groupby("rank")["peak_allocated_bytes"].max()
    if 0 not in by_rank.index:
        return Check(FAIL, f"no CUDA memory rows for rank 0 ({said})", values)
    mine = float(by_rank.loc[0])
    diff = abs(mine / ref - 1)
    others = "; other ranks' trace peaks: " + ", ".join(f"r{r} {_gb(v)}" for r, v in by_rank.items() if r != 0) \
        if len(by_rank) > 1 else ""
    detail = (f"rank 0: trace peak {_gb(mine)} over the profiled steps {sorted(set(cuda['step']))} vs "
              f"torch.cuda.max_memory_allocated {_gb(ref)} over the whole run: {diff * 100:.2f}% apart "
              f"(tolerance {MEMORY_TOL * 100:g}%){others}")
    values.update(rank0_trace_peak_bytes=mine)
    return Check(PASS if diff <= MEMORY_TOL else FAIL, detail, values)


# ------------------------------------------------------------------------------------------- prediction

def check_prediction(summary, run_json: dict) -> Check:
    """no_host_gaps' predicted step time of the eager run against the same step measured as a CUDA graph."""
    import tracekit

    table = tracekit.whatif(summary, ["baseline", "no_host_gaps"]).set_index("scenario")["step_time_us"]
    base, pred = float(table["baseline"]) / 1e3, float(table["no_host_gaps"]) / 1e3
    rate = (run_json.get("throughput_samples_per_s") or {}).get("unprofiled")
    eager = run_json.get("samples_per_step", math.nan) / rate * 1e3 if _finite(rate) and rate > 0 else math.nan
    window = summary.steps[summary.steps["in_window"].astype(bool)]
    launches = float(summary.kernels["calls"].sum()) / len(window) if len(window) and len(summary.kernels) \
        else math.nan
    graph = run_json.get("graph") or {}
    values = {"predicted_ms": pred, "baseline_ms": base, "eager_ms": eager, "kernels_per_step": launches,
              "graph_ms": graph.get("mean_step_ms"), "tolerance": PREDICTION_TOL}
    said = (f"predicted no_host_gaps {pred:.3f} ms per step (baseline replay {base:.3f} ms; eager un-profiled "
            f"{eager:.3f} ms measured)")
    if "skipped" in graph:
        return Check(NA, f"{graph['skipped']}; {said}", values)
    if "error" in graph or not _finite(graph.get("mean_step_ms")):
        return Check(FAIL, f"no CUDA graph time: {graph.get('error', graph)}; {said}", values)
    if not math.isfinite(pred) or pred <= 0:
        return Check(FAIL, f"no prediction: {said}", values)
    ratio = graph["mean_step_ms"] / pred
    values["ratio"] = ratio
    status = PASS if abs(ratio - 1) <= PREDICTION_TOL else FAIL
    return Check(status, f"{said}; measured as a CUDA graph {graph['mean_step_ms']:.3f} ms: measured / predicted "
                         f"{ratio:.2f} (tolerance +-{PREDICTION_TOL * 100:g}%)", values)
