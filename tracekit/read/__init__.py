"""Stage 1, read: trace files -> one events table per rank.

In: a run folder, a file or an fsspec URL. Out: ``reader.read_rank(path)``, a rank's events (one row per complete event,
times in integer ns, names as categoricals), its communication args table and its ``RankMeta`` (rank, device
properties, host name).

Open first: ``reader.py`` (``read_tables`` also gives every host op, with its shapes, and the ``[memory]``
events, from ``opcolumns.py``; ``meta.py`` holds what it returns). ``files.py`` finds and inflates files and reads a
rank from a name, ``stream.py`` cuts a document's events array into chunks, ``bytecolumns.py`` turns a chunk's bytes
into columns by a compiled pass (``_events_kernel.py`` over the JSON tokenizer ``_json_kernel.py``, reading the
fields ``bytefields.py`` lists), ``kineto.py`` holds the msgspec structs that decode what that pass does not take,
and ``columns.py`` turns them into the same columns, ``commargs.py`` the communication calls' args,
``pairs.py`` reads Chrome ``B``/``E`` pairs as complete events, ``categories.py`` the event categories,
``release.py`` hands freed memory back between a rank's stages. Nothing here knows what an event means.
"""
