"""Stage 3, rank: one rank's file -> a small ``RankResult``, mapped over every rank of a run.

In: trace files and a ``Config``. Out: one ``RankResult`` per rank (a few rows per step, collective and gap, and the
rank's node table of the dependency graph), in rank order.

Open first: ``analyze.py`` (``analyze_rank``: read, classify, reduce; the unit of parallel work). ``engine.py`` maps
it in this process, a process pool or Dask, ``cache.py`` keeps results on disk by key, ``graph.py`` builds a rank's
dependency graph in the worker (``collrows.py``: which collective each comm node is), ``whatruns.py`` its kernel,
operator and memory tables.
"""
