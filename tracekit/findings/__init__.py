"""Stage 6, findings: the run's tables -> what to change.

In: the per-rank, collective, FSDP and gap tables. Out: a tuple of ``Finding`` (kind, severity, ranks, the numbers
that fired it, a recommendation), largest predicted gain first (``order.py``).

Open first: ``checks.py`` (``find`` and the idle and host checks). ``finding.py`` holds the Finding type and
severity rules, ``comm_findings.py`` the communication checks, ``fsdp_findings.py`` those for sharded training,
``memory_findings.py`` and ``roofline_findings.py`` those of memory and of ops far from their roofline,
``tp_findings.py`` exposed tensor-parallel communication (after the replay, from the critical path), and
``order.py`` the final order, by what each fix gains.
"""
