"""The columns of the tables of what runs: kernels, operators, FLOPs per step and memory (``tracekit.schema`` has
the rest). Units are in the names, as there; unknown numbers are NaN, never 0.

Sources of the definitions: HolisticTraceAnalysis' ``get_gpu_kernel_breakdown`` (kernels: sum, count, mean, min,
max, std per rank and name over the whole trace), the retired TensorBoard plugin's Operator view (host and device
self/total times, grouped by name or by name and input shapes), ``torch.profiler``'s ``key_averages()`` (host self
time), TraceLens (FLOPs and bytes from shapes, achieved TFLOPS/s and GB/s, the roofline), ``FlopCounterMode``
(the FLOPs formulas) and the vendors' datasheets (``tracekit.devices``).
"""

from __future__ import annotations

# summary.kernels: one row per rank x device event name (kernels, memcpys, memsets).
KERNEL_COLUMNS = {
    "rank": "rank",
    "name": "device event name",
    "kind": "compute / comm / memory (tracekit's classification; unknown for events only launched before the trace)",
    "streams": "streams it ran on",
    "calls": "times it ran in the window (as HolisticTraceAnalysis' kernel breakdown counts them)",
    "total_us": "sum of its durations in the window",
    "mean_us": "mean duration in the window (NaN when it did not run there)", "min_us": "shortest",
    "max_us": "longest",
    "std_us": "standard deviation of the durations (n - 1; 0 for one call, as HolisticTraceAnalysis)",
    "kind_share_pct": "total_us as a share of the rank's window total for its kind",
    "trace_calls": "times it ran in the whole trace, events launched before the trace included",
    "trace_us": "sum of those durations",
    "pre_trace_calls": "events of this name launched before the trace (in trace_calls, not in calls)",
    "rank_spread_pct": "(largest - smallest) / mean of this name's total_us over the ranks that run it",
}

_OP_SHARED = {
    "calls": "times the op ran",
    "host_self_us": "host time minus the ops it encloses on its thread (key_averages' self CPU time)",
    "host_total_us": "host time, children included (key_averages' CPU total)",
    "device_self_us": "device events it launched itself (NaN on CPU-only ranks)",
    "device_us": "device events it and its descendants launched (NaN on CPU-only ranks)",
    "flops": "FLOPs from the recorded shapes, summed over calls (NaN when not modelled or a call's shapes unknown)",
    "bytes": "bytes its tensors move (each input read and the output written once), summed over calls",
    "host_link_bytes": "the part of bytes that crossed the host link (host <-> device copies: one buffer each)",
    "counted_flops": "FLOPs of its calls that are the innermost matmul-class op of their call tree: what MFU adds up",
    "window_counted_flops": "counted_flops of the calls inside the window's steps",
    "flops_arg": "the profiler's own FLOPs estimate (with_flops=True), summed; NaN without it",
    "kind": "matmul / conv / attention / elementwise / norm, or missing when not modelled",
    "dtype": "the dtype it ran in, from its recorded Input type ('mixed' when calls differ)",
    "math": "the peak it is judged at: its dtype's key, 'tf32' where fp32 calls ran TF32 kernels ('mixed': unknown)",
    "achieved_tflops": "flops / its device time (host time on CPU-only ranks), TFLOPS/s",
    "achieved_gbps": "bytes / the same time, GB/s",
    "roofline_us": "max(flops / peak at its math, bytes / memory bandwidth or, for host_link_bytes, the host link): its "
                   "time at the device's roofs; NaN where the op beat it (beyond_bound)",
    "pct_of_roofline": "roofline_us / measured time x 100: never above 100",
    "beyond_bound": "a rate beat the bound it was judged against (cache, a math mode unseen): that rate and the "
                    "roofline are NaN (tracekit.events.bounds)",
}
# summary.ops: one row per rank x op name (aten::*, user annotations) over the whole trace.
OP_COLUMNS = {"rank": "rank", "name": "op or annotation name", **_OP_SHARED}
# summary.ops_by_shape: the same, one row per rank x op name x input shapes and types (TensorBoard's grouping).
OP_SHAPE_COLUMNS = {"rank": "rank", "name": "op or annotation name", "input_dims": "its Input Dims, as recorded",
                    "input_type": "its Input type, as recorded", **_OP_SHARED}
# Per rank and step, added to summary.steps.
STEP_FLOP_COLUMNS = {
    "rank": "rank", "step": "ProfilerStep number",
    "matmul_flops": "counted FLOPs of the ops that started in the step (0: none; NaN on a rank with no cpu_op, or "
                    "none of a usable duration)",
    "matmul_at_peak_us": "the time those FLOPs take at the device's dense peak for each op's dtype",
}
# summary.memory: one row per rank x device x step, from profile_memory's [memory] events.
MEMORY_COLUMNS = {
    "rank": "rank", "device_type": "c10 DeviceType code (0 CPU, 1 CUDA, ...)", "device_id": "device index",
    "device": "cpu / cuda:<id> / <type>:<id>",
    "step": "ProfilerStep number; -1 for a trace without steps (the whole trace)",
    "peak_allocated_bytes": "largest Total Allocated in the step (or at its start)",
    "peak_reserved_bytes": "largest Total Reserved in the step (or at its start)",
    "start_allocated_bytes": "Total Allocated as the step began: the last event before it, else its first event's "
                             "less that event's Bytes (NaN when unknown)",
    "end_allocated_bytes": "Total Allocated as the step ended",
    "growth_bytes": "end_allocated_bytes - start_allocated_bytes",
    "device_memory_bytes": "the device's memory from deviceProperties totalGlobalMem (NaN when unknown)",
    "in_window": "whether the step is in the metrics' window (a trace without steps: True)",
}
# summary.memory_top: per rank x device, the ops whose allocations were live at the peak of the peak step.
MEMORY_TOP_COLUMNS = {
    "rank": "rank", "device": "as in summary.memory", "step": "the step of the device's peak",
    "op": "innermost host op or annotation around the allocation ('(no op)' when none)",
    "live_bytes": "bytes it allocated that were still allocated at the peak",
    "allocations": "those allocations",
}
# summary.memory_timeline: per rank x device, Total Allocated/Reserved over time, binned to at most 1000 points
# (each bin's largest values): what the Memory page draws.
MEMORY_TIMELINE_COLUMNS = {
    "rank": "rank", "device": "as in summary.memory", "start_us": "the bin's first event, from the run's origin",
    "allocated_bytes": "largest Total Allocated in the bin", "reserved_bytes": "largest Total Reserved in the bin",
}
# summary.op_steps: per rank x window step x op name, its calls and self times in that step.
OP_STEP_COLUMNS = {
    "rank": "rank", "step": "ProfilerStep number (window steps only)", "name": "op or annotation name",
    "calls": "calls that started in the step", "host_self_us": "their host self time",
    "device_self_us": "their own device events' time (NaN on CPU-only ranks)",
}
# summary.optimization: where optimisation pays (tracekit.predict.optimize), one row per candidate op.
OPTIMIZATION_COLUMNS = {
    "name": "op name", "ranks": "ranks it runs on with a known roofline",
    "critical_path_us": "its events' own time on the steps' critical paths, per step",
    "measured_us": "its measured time over the whole trace, all ranks (device on device ranks, host on CPU-only)",
    "roofline_us": "the same at the device's roofs (summary.ops.roofline_us)",
    "pct_of_roofline": "roofline_us / measured_us x 100",
    "predicted_step_us": "the replayed step time with its events at their roofline time",
    "predicted_saving_us": "baseline step time - predicted_step_us, per step",
    "saving_pct": "predicted_saving_us as a share of the baseline step",
    "host_copy": "it copies between host and device: its roof is the host link (PCIe, NVLink-C2C), not a kernel's",
}
