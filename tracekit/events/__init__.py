"""Stage 2, events: one rank's events -> what each event is, and pure per-rank tables.

In: the events, ops and memory tables of ``tracekit.read``. Out: classified events (compute, comm or memory), idle
gaps with their time split by cause, one row per collective call, FSDP units, the per-rank and per-step metrics,
and the kernel, operator and memory tables.

Open first: ``classify.py`` (which events run on a device and what each does), then ``metrics.py`` (the pure
functions that reduce classified events to tables). ``causes.py`` names why the device idles and ``gapsplit.py``
splits each idle gap by it, ``collectives.py`` sizes collective calls (``p2p.py`` keeps send/recv apart;
``pgctx.py`` finds a gloo call's group from what enqueued it), ``fsdp_hooks.py`` and ``fsdp.py`` read FSDP's
annotations, ``hostops.py`` names the host ops the analysis keeps, ``config.py`` the validated options. What ran:
``kernels.py`` (per kernel name), ``ops.py`` with ``optree.py``, ``flops.py`` and ``opcosts.py`` (per operator:
times, FLOPs, bytes, roofline; ``bounds.py`` the bound each is judged against and the rule that no rate exceeds
it; ``grouping.py`` sums its per-call columns one at a time), ``memory.py`` (``[memory]`` events).
"""
