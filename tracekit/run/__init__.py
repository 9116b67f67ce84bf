"""Stage 4, run: every rank's results -> run-level tables.

In: the ``RankResult``s of ``tracekit.rank``. Out: clock offsets between hosts, each collective matched across
ranks (who waits for whom, stragglers, imbalance, mismatches), and the run's dependency graph.

Open first: ``crossrank.py``. ``clocks.py`` estimates each host's clock offset from the collectives it shares,
``rungraph.py`` joins the ranks' graphs with the collectives' cross-rank edges and the send->recv ones, ``whatruns.py``
the ranks' kernel, operator and memory tables and each step's FLOPs and MFU. Model parallelism: ``pgjoin.py`` (open
first) gives every call its process group and dimension (``pgdims.py``), pairs sends with recvs (``p2p.py``) and
splits P2P waiting from communication, per dimension (``commdims.py``).
"""
