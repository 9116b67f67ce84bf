"""The fields the compiled pass reads (``bytecolumns``), as msgspec's structs declare them (``kineto``): their keys,
their order in the pass's arrays (``FIELD``), and which JSON types msgspec takes for each (``ALLOWED``); a type it
refuses makes the pass refuse the chunk too."""

from __future__ import annotations

import msgspec
import numpy as np

from tracekit.read._events_kernel import key_table
from tracekit.read._json_kernel import (ABSENT, BIG_INT, BOOL, CONTAINER, ESCAPED, FLOAT, INT, NULL, OBJECT, STRING,
                                        TAGS)
from tracekit.read.kineto import _OTHER_PHASES, Args, _Event

_TOP = ("cat", "name", "pid", "tid", "ts", "dur", "args")  # args last (the kernel's rule)
assert _TOP == tuple(f.name for f in msgspec.structs.fields(_Event) if f.name != "ph")
_ARGS = msgspec.structs.fields(Args)
FIELD = {name: k for k, name in enumerate(_TOP)} | {f.name: len(_TOP) + k for k, f in enumerate(_ARGS)}
TOP_KEYS = key_table([k.encode() for k in ("ph", *_TOP)])
ARG_KEYS = key_table([f.encode_name.encode() for f in _ARGS])
PHASES = ("X", "i", "B", "E", *_OTHER_PHASES)  # kind: 0 complete, 1 instant, 2 and 3 begin/end, the rest skipped
COMPLETE, INSTANT, PAIRED = PHASES.index("X"), PHASES.index("i"), (PHASES.index("B"), PHASES.index("E"))
PHASE_TABLE = key_table([p.encode() for p in PHASES])[:2]

# What each declared field may hold, as msgspec's types say (int | str | None, int | float | None, str, Raw).
_ID = (ABSENT, NULL, INT, STRING, ESCAPED)
_NUM = (ABSENT, NULL, INT, FLOAT, BIG_INT)
_TEXT = (ABSENT, STRING, ESCAPED)
_OPTIONAL_TEXT = (ABSENT, NULL, STRING, ESCAPED)
_ANY = (ABSENT, NULL, INT, FLOAT, STRING, ESCAPED, CONTAINER, BOOL, BIG_INT)  # a Raw field: any value


def _allowed(annotation) -> tuple:
    text = str(annotation)
    if "Raw" in text:
        return _ANY
    if "float" in text:
        return _NUM
    if "int" in text:
        return _ID
    return _OPTIONAL_TEXT if "None" in text else _TEXT


ALLOWED = {"cat": _TEXT, "name": _TEXT, "pid": _ID, "tid": _ID, "ts": _NUM, "dur": _NUM, "args": (ABSENT, OBJECT),
           **{f.name: _allowed(f.type) for f in _ARGS}}
RAW = tuple(f.name for f in _ARGS if ALLOWED[f.name] is _ANY)
TEXT_FIELDS = tuple(name for name, kinds in ALLOWED.items() if STRING in kinds)
ARGS_DECODER = msgspec.json.Decoder(Args)
MAX_DEPTH = 64  # values nested deeper are refused and read by msgspec (its limit depends on the Python stack)
_ALLOWED_TABLE = np.zeros((len(FIELD), TAGS), dtype=np.bool_)
for _name, _tags in ALLOWED.items():
    _ALLOWED_TABLE[FIELD[_name], list(_tags)] = True
# The kinds msgspec builds as typed structs (complete and instant events; begin/end are refused later) and the field
# an instant does not have (its "dur" is an unknown key there, passed over).
_TYPED_KINDS = np.array([p in ("X", "i", "B", "E") for p in PHASES], dtype=np.bool_)
SPANS = np.array([name in RAW for name in FIELD], dtype=np.bool_)  # a Raw field keeps an integer's text, not its value
CHECKS = (_ALLOWED_TABLE, _TYPED_KINDS, PHASES.index("i"), FIELD["dur"])
