"""The Python literals the profiler writes in ``Concrete Inputs`` (``"[1, 1]"``, ``"False"``, ``"0.5"``, ``"None"``),
read without ``ast``: ``ast.literal_eval`` called from several threads at once (Dask's threaded workers) can raise
CPython 3.11's ``SystemError: AST constructor recursion depth mismatch``.

>>> literal("[2, 2]"), literal("False"), literal(" 0.5 "), literal("None"), literal("(1,)"), literal("x")
([2, 2], False, 0.5, None, [1], None)
"""

from __future__ import annotations

import functools
import re

import msgspec

_WORDS = {"True": "true", "False": "false", "None": "null"}
_WORD = re.compile(r"\b(True|False|None)\b")
_TRAILING_COMMA = re.compile(r",\s*([\])])")


@functools.lru_cache(maxsize=4096)
def literal(text: str):
    """The value of a number, bool, None or (nested) list/tuple literal, tuples as lists; None for anything else
    (an empty string, a name, a string literal)."""
    s = text.strip()
    if not s:
        return None
    s = _TRAILING_COMMA.sub(r"\1", _WORD.sub(lambda m: _WORDS[m.group(1)], s)).replace("(", "[").replace(")", "]")
    try:
        value = msgspec.json.decode(s)
    except msgspec.DecodeError:
        return None
    return None if isinstance(value, (str, dict)) else value
