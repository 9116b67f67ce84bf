"""What ran on one rank: its operator and memory tables, from its classified events, host ops and ``[memory]``
events (``tracekit.events.ops``, ``.memory``), with the device's peaks. (Its kernel table is the caller's:
``tracekit.events.kernels``.)"""

from __future__ import annotations

import pandas as pd

from tracekit import devices
from tracekit.events.memory import memory_table, memory_timeline, top_allocators
from tracekit.events.ops import has_operators, kernel_ops, launches, op_tables, precision_facts, usable
from tracekit.read.opcolumns import MEMORY_COLUMNS, OP_COLUMNS
from tracekit.read.reader import RankMeta


def _names(meta: RankMeta) -> list[str]:
    return sorted({n for n in meta.device_names if n})


def peaks_of(meta: RankMeta) -> devices.DevicePeaks | None:
    """The device's datasheet peaks, when its deviceProperties name (and memory) identify one device."""
    names = _names(meta)
    if len(names) != 1:
        return None  # no device, or several kinds: no one peak
    memory = meta.device_memory_bytes[0] if meta.device_memory_bytes else None
    return devices.match(names[0], memory)


def what_runs(meta: RankMeta, events: pd.DataFrame, ops: pd.DataFrame | None, memory: pd.DataFrame | None,
              steps: pd.DataFrame, window: pd.DataFrame, device_rank: bool) -> dict:
    """RankResult's ops, ops_by_shape, step_flops, op_steps, memory, memory_top, memory_timeline and kernel_ops;
    and under ``quality`` and ``facts`` the rank's data-quality and breakdown columns this adds."""
    ops = pd.DataFrame(columns=list(OP_COLUMNS)) if ops is None else ops
    memory = pd.DataFrame(columns=list(MEMORY_COLUMNS)) if memory is None else memory
    peaks = peaks_of(meta) if device_rank else None
    # Which op launched each device event: the op table's device times and the kernels' ops, found once.
    valid = usable(ops)
    launched = launches(valid, events) if device_rank and len(valid) else None
    by_shape, by_name, step_flops, op_steps, unknown_flops = op_tables(ops, events, steps, window, peaks, device_rank, launched)
    table = memory_table(memory, steps, meta.device_memory_bytes)
    table["in_window"] = table["step"].isin(window["step"]) | (table["step"] < 0) if len(table) else []
    names = " / ".join(_names(meta)) or "unnamed"
    quality = {"memory_events": len(memory),
               "device_peaks": peaks.name if peaks is not None else f"unknown: {names}" if device_rank else "",
               # Operators recorded, none with a usable duration: op_tables counts none, so FLOPs and MFU are NaN.
               "operators_unusable": has_operators(ops) and not has_operators(valid),
               "ops_beyond_bound": int(by_shape["beyond_bound"].sum()) if len(by_shape) else 0,
               # Without record_shapes every matmul's FLOPs are unknown: the shapes_recorded note says so once.
               "unknown_flops": unknown_flops if meta.shapes_recorded is not False else ""}
    return {"ops": by_name, "ops_by_shape": by_shape,
            "step_flops": step_flops, "op_steps": op_steps, "memory": table,
            "memory_top": top_allocators(memory, ops, table), "memory_timeline": memory_timeline(memory),
            "kernel_ops": kernel_ops(ops, events, launched) if device_rank and len(ops) else pd.DataFrame(
                columns=["rank", "kernel", "op"]),
            "quality": quality, "facts": precision_facts(by_shape)}
