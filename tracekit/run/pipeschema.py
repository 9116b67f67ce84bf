"""The pipeline tables' columns (``summary.pipeline``, ``summary.pipeline_blocks``) and their words.

Glossary
--------
stage       One pipeline-parallel piece of the model; a rank runs one, or v (interleaved schedules).
microbatch  One slice of a step's batch that a pipeline's stages pass along.
block       One stage's compute for one microbatch in one phase (F forward, B backward, I input grad, W weight grad).
bubble      Pipeline time a rank runs nothing but stage-to-stage transfers: fill (before its first forward),
            wait (between its blocks), drain (after its last).
"""

from __future__ import annotations

# summary.pipeline: one row per pipeline stage x step (tracekit.events.bubble, tracekit.run.pipeline); empty without one.
PIPELINE_COLUMNS = {
    "stage": "pipeline stage (PP: actions' index, else the rank's place in its pipeline group; -1 unknown)",
    "rank": "the rank that runs it", "step": "ProfilerStep",
    "microbatches": "forward microbatches the stage ran in the step",
    "fwd_us": "the stage's forward compute (its F blocks' compute, receive waits excluded)",
    "bwd_us": "its backward compute (B, I and W blocks)", "compute_us": "fwd_us + bwd_us",
    "bubble_us": "the rank's step time with nothing but P2P transfers or nothing running (step_us - busy)",
    "fill_us": "the bubble before the rank's first forward block", "drain_us": "the bubble after its last block",
    "wait_us": "the bubble between", "bubble_pct": "bubble_us / step_us x 100",
    "theory_bubble_pct": "the schedule's own bubble: (p-1)/(m+p-1) (gpipe, 1f1b), (p-1)/(v m+p-1) (interleaved); "
                         "NaN for a schedule without a closed form (note says)",
    "step_us": "the step's time (as summary.steps)",
    "other_busy_us": "the rank's busy time outside its blocks (optimizer, collectives, ...)",
    "schedule": "the schedule read from the blocks' order: gpipe, 1f1b, interleaved, looped_bfs, zero_bubble",
    "stages": "p: the pipeline's ranks, one per stage or v stages each (the p of the theory; its stages: p x v)",
    "stages_per_rank": "v: stages one rank holds",
    "microbatch_compute_us": "what one microbatch costs the stage: per phase the lower quartile of its blocks' "
                             "compute over the window, summed (reads through a time-shared host's inflated blocks)",
    "imbalance_ratio": "the stage's microbatch_compute_us over the median of the other stages'",
    "order_agreement_pct": "share of the rank's blocks in the order run.json's intended_schedule lists (NaN without it)",
    "in_window": "step in the metrics window", "note": "why a number is unknown, or what disagrees with run.json",
}
# summary.pipeline_blocks: the schedule that ran, one row per block (tracekit.events.pipeline).
PIPELINE_BLOCK_COLUMNS = {
    "rank": "rank", "stage": "pipeline stage", "step": "ProfilerStep the block starts in",
    "microbatch": "microbatch", "phase": "F (forward), B (backward), I (input grad), W (weight grad)",
    "start_us": "its first compute's start, from the run's origin", "end_us": "its last compute's end",
    "compute_us": "the union of its compute (receive waits excluded)",
    "source": "pp_action (PP: annotations), gpipe_annotation (Forward i / Backward i), inferred (compute between P2P calls)",
}
