"""The vocabulary and the tables: every column tracekit produces, with its dtype and unit.

Glossary
--------
rank        One process of the job; its trace is one file. ``distributedInfo.rank`` names it.
device      Where a rank's work runs: a GPU, or the CPU training thread(s) on CPU-only (gloo) runs.
device event  A kernel, memcpy or memset on a GPU, an MTIA device event (``mtia_ccp_events``); on CPU-only
            traces, a CPU op or a gloo collective.
device rank A rank whose trace says it ran a device (``categories.device_evidence``); all other ranks are CPU-only.
kind        What a device event does: ``compute``, ``comm`` (communication) or ``memory``.
step        One ``ProfilerStep#N`` annotation; the workloads make one step one optimizer step. Without one: an
            engine's step annotation or ``Config.step_pattern``'s, numbered 0, 1, ... (``tracekit.events.steps``).
window      The time range metrics are computed over (see ``Config.window``).
span        Last device end minus first device start inside the window.
busy        Time when at least one device event runs (union over streams).
overlap     Time when communication and compute run at once.
exposed     Communication time with no compute under it: ``comm - overlap``.
idle        ``span - busy``; a *gap* is one maximal idle interval.
collective  One communication call (all_reduce, all_gather, ...) on one rank.
pg          The process group a collective runs in.
seq         A collective's sequence number within its process group, when the trace records it.

Units are in the column names: ``_us`` microseconds, ``_ns`` nanoseconds, ``_pct`` percent, ``_gbps`` GB/s (1e9 bytes
per second), ``bytes`` bytes. Unknown numbers are NaN, never 0.
"""

from __future__ import annotations

KINDS = ("compute", "comm", "memory")

# The events table: one row per complete ("X") event of every rank (for a GPU rank's analysis, without the CPU ops
# it never reads: see reader.read_rank's host_ops).
EVENT_COLUMNS = {
    "rank": ("int32", "rank of the trace the event came from"),
    "cat": ("category", "Kineto category, normalised to today's names (kernel, cuda_runtime, cpu_op, ...)"),
    "name": ("category", "event name"),
    "pid": ("category", "process id, as text"),
    "tid": ("category", "thread id (CPU) or stream lane (GPU), as text"),
    "ts_ns": ("int64", "start, ns on the job's common clock (baseTimeNanoseconds added when present)"),
    "dur_ns": ("int64", "duration, ns; -1 when the trace gives none or an impossible one"),
    "correlation": ("int64", "CUDA/HIP correlation id linking a launch to its kernel; -1 when absent"),
    "external_id": ("int64", "Kineto external id; -1 when absent"),
    "stream": ("int64", "GPU stream of a device event; -1 when absent or not numeric"),
    "kind": ("category", "compute / comm / memory for device events; missing for host events and pre_trace ones"),
    "launch_ns": ("int64", "start of the call that launched a device event (events.graphs for graphs); -1 if unknown"),
    "launch_row": ("int64", "row of that runtime call in the events table; -1 when unknown"),
    "step": ("int64", "ProfilerStep number the event belongs to (device events: by their launch); -1 outside steps "
             "and for events launched before the trace"),
    "pre_trace": ("bool", "a device event launched before the trace began (classify.launched_before_trace): left "
                  "out of every metric, step and collective, counted in data_quality"),
}

# Communication metadata, one row per communication-related event (annotation, record_param_comms, kernel).
COMM_ARG_COLUMNS = {
    "rank": ("int32", ""),
    "row": ("int64", "row of the event in the events table"),
    "collective": ("object", "raw collective name from the args or the annotation"),
    "pg": ("object", "process group name or id, as text"),
    "pg_desc": ("object", "Process Group Description (NCCL args: default_pg, mesh_tp, pp_p2p_*); None when absent"),
    "peer": ("float64", "send/recv: the peer's global rank (NCCL's Dst Rank / Src Rank); NaN when absent"),
    "peer_local": ("float64", "gloo c10d::send/recv_: the peer's group-local rank (Concrete Inputs); NaN otherwise"),
    "seq": ("float64", "sequence number in the process group (NaN when absent)"),
    "in_nelems": ("float64", "input elements (NaN when unknown)"),
    "out_nelems": ("float64", "output elements (NaN when unknown)"),
    "dtype": ("object", "element type as written in the trace"),
    "group_size": ("float64", "ranks in the process group (NaN when unknown)"),
    "input_nelems": ("float64", "elements of the first input tensor, from Input Dims, after any leading non-tensor "
                     "inputs (NaN when a tensor list or absent)"),
    "input_type": ("object", "that tensor's type, from Input type (None when absent)"),
    "second_nelems": ("float64", "elements of the input right after it when a plain tensor too (c10d's *_base_ ops "
                      "take output, input); NaN otherwise"),
}

# Why the device idles: the causes a gap's time is split between, in their one order (tracekit.events.gapsplit).
IDLE_CAUSES = {"sync": "under a call that blocks until the device drains", "alloc": "under an allocation call",
               "data": "under a DataLoader __next__", "comm_wait": "under a host collective call or its wait",
               "host": "under other recorded host work", "host_unrecorded": "with nothing recorded on the launching "
               "thread", "other": "before work launched ahead of it (a dependency), or with no host thread known"}

# The Summary's tables. The first columns of each are the contract; every column is listed with its meaning.
RANK_COLUMNS = {
    "rank": "rank",
    "device": "device name from deviceProperties, 'gpu' when unnamed, 'cpu' on CPU-only ranks",
    "steps": "steps (ProfilerSteps, or the step annotations found) in the window; 0 without steps",
    "step_time_us": "mean step time in the window (steps tile the timeline: start to next start); NaN without steps",
    "span_us": "last device end - first device start in the window",
    "busy_us": "union of all device events", "compute_us": "union of compute events",
    "comm_us": "union of communication events", "overlap_us": "communication under compute: |comm ∩ compute|",
    "exposed_comm_us": "comm_us - overlap_us",
    "p2p_wait_us": "P2P calls waiting for their peer, nothing else running: bubble, not comm (run.commdims)",
    "memory_us": "union of memcpy/memset events (0 on CPU ranks: no separate copy engine)",
    "idle_us": "span_us - busy_us", "overlap_pct": "overlap_us / comm_us * 100; NaN without communication",
    "idle_pct": "idle_us / span_us * 100", "allreduce_count": "all_reduce calls in the window",
    "allreduce_us": "sum of all_reduce call durations (concurrent calls each count)",
    "allreduce_bytes": "sum of all_reduce sizes; NaN when any size is unknown",
    **{f"idle_{c}_us": f"idle time, summed over the gaps, {words}" for c, words in IDLE_CAUSES.items()},
    "idle_graph_launch_us": "the part of idle_host_us in gaps that end with a graph launch's work (host_kind)",
    "sync_calls": "synchronizing runtime calls inside the window's steps",
    "sync_top_call": "the synchronizing call taking the most host time among them (None without any)",
    "graph_launches": "cudaGraphLaunch/hipGraphLaunch calls in the window's steps (the whole trace without steps)",
    "data_parallel": "DataParallel.forward seen in the trace",
    "ddp": "DistributedDataParallel seen in the trace (its forward or its gradient reducer's ops)",
    "gpu_runtime": "cuda or hip, from the names of the runtime calls, or mtia; None without any (CPU ranks)",
    "reduced_precision_us": "union of compute kernels whose names say fp16/bf16/fp8",
    "compute_kernel_us": "union of compute events (the denominator for reduced_precision_us)",
    "matmul_device_us": "device time of the matmul-class ops whose dtype was recorded (Input type), over the whole "
                        "trace as summary.ops; NaN without",
    "matmul_reduced_us": "the part of it in ops that ran in bf16, fp16 or fp8",
    "compute_major": "CUDA compute capability major of the GPUs (NaN when not in the trace)",
    "training": "backward or optimizer ops seen (rank.analyze.trains); False: forward only (inference advice); "
                "None: unknown, no operator recorded (training advice)",
    "comm_wait_us": "wall-clock time in matched collectives before the last rank arrived (union)",
    "comm_transfer_us": "wall-clock time in matched collectives after the last rank arrived (union)",
    "last_arrivals": "matched collectives this rank started strictly last; missing when none matched",
    "matmul_flops_per_step": "mean matmul_flops over the window's steps",
    "mfu_pct": "MFU over the window: the steps' matmul_at_peak_us over their device_step_us, x 100 (NaN as steps')",
}

STEP_COLUMNS = {
    "rank": "rank", "step": "ProfilerStep number (steps from another annotation: 0, 1, ... in time order)",
    "start_us": "step start, from the run's origin: where the step before it ended (steps tile)",
    "ended_by": "the clock that ended the step: 'host' (an annotation) or 'device' (its and earlier steps' work)",
    "step_us": "to the next step's start: its annotation or the end of the device work so far, the later",
    "device_step_us": "the step on the device's clock (from when the earlier steps' work is done); MFU's time",
    "compute_us": "computation not overlapped by communication (the plugin's 'Computation')",
    "overlap_us": "computation and communication at once",
    "exposed_comm_us": "communication not overlapped (the plugin's 'Communication')",
    "other_us": "step_us - compute - overlap - exposed_comm - p2p_wait", "comm_us": "the step's communication less p2p_wait",
    "p2p_wait_us": "P2P calls waiting for their peer, nothing else running: bubble, not comm (run.commdims)",
    "in_window": "whether the step is in the metrics' window",
    "matmul_flops": "FLOPs of the step's innermost matmul-class ops, from their shapes (tracekit.events.ops); NaN "
                    "when some are unknown or the rank recorded no CPU op (annotations only)",
    "matmul_at_peak_us": "the time those FLOPs take at the device's dense peak for each op's dtype",
    "mfu_pct": "matmul_at_peak_us / device_step_us x 100; NaN: unknown device or FLOPs, no compute, or above 100",
}

COLLECTIVE_COLUMNS = {
    "rank": "rank", "step": "step of its launch (-1 outside steps)",
    "op": "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, barrier or other (send/recv: summary.p2p)",
    "pg": "process group name or id; None when the trace does not say",
    "pg_desc": "its group's description (args, else pg_config: run.pgdims); None when unknown",
    "dim": "parallel label: dp, fsdp, tp, pp, ep, cp, group's name, a+b, unknown (run.pgdims)", "seq": "Seq (or NaN)",
    "start_us": "device start, from the run's origin", "dur_us": "duration",
    "bytes": "payload per nccl-tests: all_gather output, every other op its input (NaN if unknown)",
    "dtype": "element type as written in the trace",
    "group_size": "ranks in the group: args, pg_config, the call's own shapes, else world_size (NaN if unknown)",
    "algbw_gbps": "bytes / dur, GB/s",
    "busbw_gbps": "algbw x the op's nccl-tests factor", "name": "kernel or annotation name",
    "in_window": "whether its step is in the window",
    "match_id": "rows with the same id are one collective on different ranks",
    "matched_ranks": "ranks this collective was seen on",
    "matched": "seen on 2+ ranks and not listed as unreliable in mismatches",
    "wait_us": "latest start among ranks - own start (NaN unless matched)",
    "transfer_us": "own end - latest start, never negative (NaN unless matched)",
    "last_arrival": "this rank started strictly last",
}

DATA_QUALITY_COLUMNS = {
    "rank": "rank",
    "device_evidence": "why the rank is a device rank (device events, device API events, a device arg, "
                       "deviceProperties), or 'none: a CPU-only trace'",
    "device_events": "device events with a usable duration (CPU-only ranks: the training thread's ops and gloo calls)",
    "device_events_absent": "a device rank whose trace holds no device event (kernels not collected): device metrics NaN",
    "pre_trace_events": "device events launched before the trace began: left out of the window, steps and collectives",
    "pre_trace_device_us": "union of those events' device time",
    "unsized_ep_comm": "expert-parallel all-to-all kernels (commnames.EP_KERNELS): no args, so sizes, group NaN",
    "dropped_events": "events dropped for no, negative or impossible durations",
    "unknown_categories": "categories tracekit does not know, with their event counts ('' when none); "
                          "their events are read as host events",
    "unknown_category_events": "events of those categories",
    "rank_source": "where the rank came from: distributedInfo, file name, or only file (a single trace, rank 0)",
    "rank_out_of_range": "'negative' or 'not below its world_size N' (distributedInfo's) when the rank lies outside "
                         "0..world_size-1: suspicious, still used as stated; '' when it lies inside or can't be checked",
    "shapes_recorded": "CPU ops carry Input Dims (record_shapes=True); False: sizes that need them are unknown; "
                       "missing when the trace has no CPU op (annotations are not ops): FLOPs and MFU unknown",
    "operators_unusable": "CPU ops recorded, but none with a usable duration (all dropped): FLOPs and MFU unknown",
    "ops_beyond_bound": "ops_by_shape rows whose rate beat its bound (beyond_bound): that rate and roofline NaN",
    "unknown_flops": "steps of unknown matmul_flops and the ops with no FLOP count that make them so ('551: aten::linear x3')",
    "memory_events": "profile_memory's [memory] events in the trace (0: profile_memory was off)",
    "device_peaks": "the datasheet entry the device matched (tracekit.devices), 'unknown: <name>' when none, "
                    "'' on a CPU-only rank",
    "graph_capture_calls": "*StreamBeginCapture, *StreamEndCapture, *GraphInstantiate* calls (events.graphs)",
    "captured_steps": "window steps overlapping a graph capture: '1, 2', 'the window' (no steps), '' (none)",
    "held_back_findings": "step-speed findings held back for that capture (tracekit.findings.capture); '' none",
    "step_source": "the steps' source: 'ProfilerStep', 'detected: <regex>' (events.steps.ENGINE_STEPS), "
                   "'step_pattern: <regex>', 'none' or 'none: <why>' (per-step numbers, critical path, what-if unknown)",
    "missing_steps": "step numbers the rank's trace lacks though another rank or its own numbering has them "
                     "(tracekit.quality.missing_steps), comma-separated (a long run: first-last); '' none",
}

GAP_COLUMNS = {
    "rank": "rank", "start_us": "gap start, from the run's origin", "dur_us": "gap length",
    "cause": "the gap's largest cause (IDLE_CAUSES; ties: the first)",
    **{f"idle_{c}_us": f"the gap's time {words}" for c, words in IDLE_CAUSES.items()},
    "host_kind": "gaps with host time: 'graph launch' or 'kernel launch', the call whose work ends it; '' else",
}

# summary.imbalance: see tracekit.run.crossrank.imbalance.
IMBALANCE_COLUMNS = {
    "step": "step number (window steps only)", "ranks": "ranks that ran this step",
    "max_step_us": "the slowest rank's step time", "median_step_us": "the median step time across ranks",
    "imbalance": "max_step_us / median_step_us", "slowest_rank": "the rank with max_step_us",
}

# summary.mismatches: collectives that do not line up across ranks; see tracekit.run.crossrank.mismatches.
MISMATCH_COLUMNS = {
    "kind": "missing, size, op, order or timing (collectives); p2p_unmatched (a send or recv without its half)",
    "pg": "process group (? when the trace names none)", "op": "the op(s) at that position",
    "position": "where in the group's sequence (its Seq, or the call's order)",
    "ranks": "the ranks concerned", "detail": "what differs, in words",
    "match_id": "the match (group of calls across ranks) it concerns",
}

# summary.stragglers (ranks that pass the binomial test) and the rows of run.straggler_suspicions (over the bar
# with too little evidence): see tracekit.run.crossrank.arrival_evidence.
STRAGGLER_COLUMNS = {
    "rank": "rank",
    "matched": "matched collectives of this rank in the window",
    "last_arrivals": "of those, the ones it started strictly last",
    "last_share": "last_arrivals / matched",
    "expected_share": "the share chance gives: mean over its calls of 1 / ranks in the call",
    "p_value": "binomial P[last at >= last_arrivals of matched] by chance",
    "caused_wait_us_per_step": "per step, mean over the other ranks of their wall-clock wait in the calls it was last to",
}

# The rows of run.clock_offsets, one per rank: see tracekit.clocks.
CLOCK_OFFSET_FIELDS = {
    "rank": "rank",
    "host": "host_name of its trace (None: unknown, the rank is its own clock)",
    "offset_us": "its host's clock minus the reference host's (the lowest rank's); NaN when no call is shared",
    "lower_us": "causal lower bound on offset_us: max over shared calls of (latest start on the host - earliest end "
                "on the reference); NaN when the bounds are empty",
    "upper_us": "causal upper bound: min over shared calls of (earliest end on the host - latest start on the "
                "reference); NaN when the bounds are empty",
    "noise_us": "1.4826 x median absolute deviation of the per-call difference of mean ends",
    "samples": "matched synchronising calls shared with the reference host (reference: with any other host)",
    "bounds": "reference, ok, inconsistent (lower > upper: a wrong match or drifting clocks) or none (no shared call)",
    "conflicts": "shared calls whose own causal interval excludes offset_us (0 unless inconsistent)",
    "corrected": "whether its times were moved by offset_us onto the reference clock",
}

# summary.fsdp: one row per rank x step x FSDP unit x phase (see tracekit.events.fsdp); empty when the run has no FSDP.
FSDP_COLUMNS = {
    "rank": "rank", "api": "fsdp2 (fully_shard) or fsdp1 (FullyShardedDataParallel)",
    "unit": "FSDP2: the module path ('(root)' for the root); FSDP1: '#k', k-th unit forward in the step",
    "phase": "forward or backward", "step": "ProfilerStep of the unit's pre-hook (-1 outside steps)",
    "order": "position of the unit in its phase of the step",
    "start_us": "the pre-hook's start (when the unit asked for its parameters), from the run's origin",
    "compute_us": "compute issued in the unit's window (pre-hook to post-hook), not in a nested unit's; NaN without a post-hook",
    "gathers": "all-gathers that served this request (0: parameters already unsharded)",
    "allgather_us": "their duration", "allgather_exposed_us": "the part with no compute under it",
    "allgather_bytes": "output bytes (shard x group size on gloo); NaN if unknown",
    "allgather_dtype": "element type of the gathered parameters as the trace writes it (None without a gather)",
    "wait_us": "no-compute time from when the unit could start (CPU: its pre-hook; GPU: the end of the compute launched "
               "before it) to the end of its all-gather",
    "prefetch": "prefetched (all-gather issued before the pre-hook), on_demand, or no_gather",
    "reduces": "reductions of its gradients (reduce-scatter; an all-reduce of the full buffer on gloo)",
    "reduce_us": "their duration", "reduce_exposed_us": "the part with no compute under it",
    "reduce_bytes": "input bytes (the unsharded, padded gradient); NaN if unknown",
    "in_window": "whether its step is in the window",
}

# summary.critical_path: per window step, the time on the chain of events that ends it (tracekit.predict.critical_path).
CRITICAL_PATH_COLUMNS = {
    "rank": "the rank the path spends this time on",
    "step": "ProfilerStep the path ends (it runs from that step's start to the next step's on the rank that ends last; "
            "the last step: to its end, see steps.step_us)",
    "category": "compute, comm_transfer, launch, host, data, sync, other or unknown (see tracekit.predict.critical_path)",
    "us": "time on the path", "waiting": "on another rank than ends_on_rank: that rank was waiting for this one",
    "ends_on_rank": "the rank whose next ProfilerStep comes last: where the walk back starts",
}
CRITICAL_PATH_EVENT_COLUMNS = {
    "rank": "rank", "step": "ProfilerStep the path ends", "start_us": "from the run's origin", "end_us": "end",
    "name": "event name (for a delay: the event it delayed)",
    "kind": "the node's kind (compute, memory, comm, launch, sync, data, host, marker), 'delay': unrecorded time "
            "before the node could start, or 'unlinked': time before the first node the walk reached that the trace "
            "links to nothing earlier (category unknown)",
    "category": "as in critical_path", "waiting": "as in critical_path", "ends_on_rank": "as in critical_path",
}
# summary.graph: one row per node of the run's dependency graph (tracekit.rank.graph); what tracekit.whatif replays.
GRAPH_COLUMNS = {
    "rank": "rank", "lane": "host thread, GPU stream or gloo thread (dense id over the run); nodes of a lane run in order",
    "start_ns": "start, ns from the run's origin on the corrected clock", "end_ns": "end (a marker: its start)",
    "step": "ProfilerStep (device events: of their launch); -1 outside steps",
    "cat": "compute, memory, comm, launch, sync, data, host or marker (a ProfilerStep start, or where the last one ends)",
    "name": "event name", "in_data": "inside a DataLoader __next__",
    "coll": "row of the collective in summary.collectives (-1: not one)",
    "ps": "node whose start this one waits for (launch, gloo hand-off); -1 none",
    "pe": "node whose end this one waits for (cross-stream wait, host waiting for a collective); -1 none",
    "dr": "node whose end it waits for: a sync's drained device work, a gloo send/recv's last thread op; -1 none",
    "busy_ns": "CPU-only ranks: the part of the gap before the node, after its lane predecessor, that an enclosing "
               "compute op covers (that op's own time); 0 elsewhere",
    "group": "dense id of the matched collective: its transfer starts when every member has started; -1 none",
    "p2p": "row of the call among its rank's P2P calls (-1: not one)", "pair_src": "send/recv: the other's node (-1)",
}
# tracekit.whatif: one row per scenario.
WHATIF_COLUMNS = {
    "scenario": "predict.scenarios.SCENARIOS, comm_x<k>; pipeline runs: PIPELINE_SCENARIOS", "step_time_us":
    "replayed mean step time: mean over ranks of each rank's mean window step", "speedup": "baseline / this", "saving_us": "baseline - this, per step", "saving_pct":
    "saving_us / baseline x 100", "reason": "'' where known, else why not (predict.scenarios.whatif)"}
