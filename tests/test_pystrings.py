"""``pystrings.python_strings``: Python-held strings while tracekit computes, the caller's setting given back after,
whatever the nesting, the threads and the errors."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.pystrings import OPTION, python_strings

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture
def caller_setting():
    """The caller chose Arrow storage by name (not pandas' default "auto"): a restore to anything else shows."""
    before = pd.get_option(OPTION)
    pd.set_option(OPTION, "pyarrow")
    yield "pyarrow"
    pd.set_option(OPTION, before)


def test_inside_new_strings_are_python_held_and_after_the_callers_setting_is_back(caller_setting):
    with python_strings():
        assert pd.Series(["a", None]).dtype.storage == "python"
    assert pd.get_option(OPTION) == caller_setting
    assert pd.Series(["a"]).dtype.storage == "pyarrow"


def test_an_error_inside_gives_the_setting_back(caller_setting):
    with pytest.raises(ZeroDivisionError), python_strings():
        1 / 0
    assert pd.get_option(OPTION) == caller_setting


def test_nested_blocks_keep_it_until_the_outer_one_ends(caller_setting):
    with python_strings():
        with python_strings():
            pass
        assert pd.get_option(OPTION) == "python"  # the inner exit did not restore under the outer block
    assert pd.get_option(OPTION) == caller_setting


def test_overlapping_threads_neither_drop_it_early_nor_leave_it_set(caller_setting):
    """A enters, B enters, A leaves (B still computes: still Python), B leaves (the caller's setting): the order
    in which plain ``option_context`` blocks would restore "pyarrow" under B and then leave "python" set."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with python_strings():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with python_strings():
            b_in.set()
            a_out.wait(5)
            seen["b after a left"] = pd.Series(["x"]).dtype.storage

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"b after a left": "python"}
    assert pd.get_option(OPTION) == caller_setting


@pytest.mark.parametrize("workers", [1, 2])  # the ranks analysed in this process, or in a pool's workers
def test_summarize_and_whatif_give_the_callers_setting_back_and_their_strings_are_python_held(caller_setting,
                                                                                             workers):
    """Strings made in a rank's analysis (a collective's name), in the run-level join (a rank's device) and in the
    what-if table (a scenario's reason)."""
    summary = tracekit.summarize(SAMPLES / "gpt-gloo-2rank", cache=False, workers=workers)
    assert pd.get_option(OPTION) == caller_setting
    for column in (summary.collectives["name"], summary.ranks["device"]):
        assert column.dtype == "str" and column.dtype.storage == "python", column.name
        assert isinstance(column.iloc[0], str)
    table = tracekit.whatif(summary, ["baseline"])
    assert pd.get_option(OPTION) == caller_setting
    assert table["reason"].dtype.storage == "python"
    assert tracekit.compare(summary, summary).table["metric"].dtype.storage == "python"
    assert pd.get_option(OPTION) == caller_setting


def test_a_rank_task_sets_it_itself_where_its_worker_did_not_inherit_it(caller_setting):
    """A forked worker inherits the caller's setting inside ``summarize``; a forkserver's, a spawned one and a Dask
    worker do not, and the rank task sets it itself."""
    from tracekit.events.config import Config
    from tracekit.rank import engine

    result = engine._rank_task(SAMPLES / "gpt-gloo-2rank" / "rank-0.pt.trace.json.gz", Config(), None)
    assert result.collectives["name"].dtype.storage == "python"
    assert pd.get_option(OPTION) == caller_setting


@pytest.mark.parametrize("run", ["gpt-gloo-2rank", "pp-1f1b-4rank", "tp-fsdp-4rank"])
def test_every_number_and_table_is_the_one_arrow_strings_give(run, monkeypatch, caller_setting):
    """The whole Summary (every table, finding and fact, as JSON) with Python-held strings against the same run
    analysed with Arrow-held strings throughout (the decorators bypassed, the caller's "pyarrow" in force)."""
    from tracekit import api
    from tracekit.rank import engine

    monkeypatch.setattr(engine, "_rank_task", engine._rank_task.__wrapped__)
    arrow = api.summarize.__wrapped__(SAMPLES / run, cache=False, workers=1)
    assert arrow.collectives["name"].dtype.storage == "pyarrow"  # the reference really is Arrow-held
    monkeypatch.undo()
    python = tracekit.summarize(SAMPLES / run, cache=False, workers=1)
    assert python.collectives["name"].dtype.storage == "python"
    assert python.to_json("all") == arrow.to_json("all")


def test_the_docstring_example_runs():
    import doctest

    from tracekit import pystrings

    result = doctest.testmod(pystrings, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0
