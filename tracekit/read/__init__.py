"""Stage 1, read: trace files -> one events table per rank.

In: a run folder, a file or an fsspec URL. Out: ``reader.read_rank(path)``, a rank's events (one row per complete event,
times in integer ns, names as categoricals), its communication args table and its ``RankMeta`` (rank, device
properties, host name).

Open first: ``reader.py`` (``read_tables`` also gives every host op, with its shapes, and the ``[memory]``
events, from ``opcolumns.py``). ``files.py`` finds and inflates files and reads a rank from a name, ``kineto.py`` holds
the msgspec structs the JSON is decoded into, ``pairs.py`` reads Chrome ``B``/``E`` pairs as complete events,
``categories.py`` the event categories, ``columns.py`` turns decoded events into columns, ``release.py`` hands freed
memory back between a rank's stages. Nothing here knows what an event means.
"""
