"""The JSON tokenizer of the compiled pass (``_events_kernel``): whitespace, strings, numbers, literals, containers
and object keys, each validated as a JSON parser would (a malformed value gives -1), with the type tags the pass
records. numba, compiled once and cached on disk.
"""

import numpy as np
from numba import njit


def kernel(**options):
    """``njit``, cached, without the GIL and without numba's reference counting (``_nrt=False``): these functions
    make no array and only index the ones they are given, and counting references to ``buf`` at every inlined
    helper's call made the pass five times slower (30 ms against 6 ms for a 3.4 MB chunk of 20,000 events). The
    smallest helpers are inlined (``inline="always"``): 7 ms a chunk against 10, for 5 s of compiling once; inlining
    all of them gains 1.5 ms more for 15 s."""
    return njit(cache=True, nogil=True, _nrt=False, **options)

# Value tags, per event and field.
# ESCAPED: a string with an escape or a byte beyond ASCII (its text is checked and decoded by msgspec);
# OBJECT: an ``args`` object (another field's object or array is a CONTAINER).
ABSENT, NULL, INT, FLOAT, STRING, ESCAPED, CONTAINER, BOOL, BIG_INT, OBJECT = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
TAGS = 10



@kernel(inline="always")
def skip_space(buf, i):  # pragma: no cover (compiled)
    n = len(buf)
    while i < n and buf[i] <= 32:  # most bytes are none of the four: one comparison
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        i += 1
    return i


@kernel(inline="always")
def _hex4(buf, i):  # pragma: no cover (compiled)
    """The four hex digits at ``i`` as a number; -1: not four hex digits."""
    if i + 4 > len(buf):
        return -1
    code = 0
    for k in range(i, i + 4):
        h = buf[k]
        if 48 <= h <= 57:
            code = code * 16 + (h - 48)
        elif 65 <= h <= 70:
            code = code * 16 + (h - 55)
        elif 97 <= h <= 102:
            code = code * 16 + (h - 87)
        else:
            return -1
    return code


@kernel(inline="always")
def string_end(buf, i):  # pragma: no cover (compiled)
    """``buf[i]`` is the opening quote: (index of the closing quote, whether there is an escape or a byte beyond
    ASCII); (-1, 0): bad."""
    n = len(buf)
    i += 1
    escaped = 0
    while i < n:
        c = buf[i]
        if c == 34:
            return i, escaped
        if c < 32:
            return -1, 0
        if c >= 128:
            escaped = 1
        elif c == 92:
            escaped = 1
            if i + 1 >= n:
                return -1, 0
            e = buf[i + 1]
            if e == 117:  # \uXXXX; a surrogate only as a high and low pair, as msgspec takes it
                code = _hex4(buf, i + 2)
                if code < 0 or 0xDC00 <= code <= 0xDFFF:
                    return -1, 0
                if 0xD800 <= code <= 0xDBFF:
                    if i + 7 >= n or buf[i + 6] != 92 or buf[i + 7] != 117:
                        return -1, 0
                    low = _hex4(buf, i + 8)
                    if not 0xDC00 <= low <= 0xDFFF:
                        return -1, 0
                    i += 6
                i += 6
                continue
            if not (e == 34 or e == 92 or e == 47 or e == 98 or e == 102 or e == 110 or e == 114 or e == 116):
                return -1, 0
            i += 2
            continue
        i += 1
    return -1, 0


@kernel(inline="always")
def _digits_end(buf, j):  # pragma: no cover (compiled)
    """The end of the run of one or more digits at ``j``; -1: no digit there."""
    n = len(buf)
    if j >= n or not (48 <= buf[j] <= 57):
        return -1
    while j < n and 48 <= buf[j] <= 57:
        j += 1
    return j


@kernel(inline="always")
def number_end(buf, i):  # pragma: no cover (compiled)
    """A JSON number at ``i``: (end, tag INT/FLOAT/BIG_INT, value if INT); end -1: not a number."""
    n = len(buf)
    j = i
    negative = False
    if j < n and buf[j] == 45:
        negative = True
        j += 1
    if j >= n or not (48 <= buf[j] <= 57):
        return -1, 0, 0
    digits_from = j
    value = 0
    if buf[j] == 48:
        j += 1
    else:
        while j < n and 48 <= buf[j] <= 57:
            if j - digits_from < 18:
                value = value * 10 + (buf[j] - 48)
            j += 1
    digits = j - digits_from
    tag = INT if digits <= 18 else BIG_INT
    if j < n and buf[j] == 46:  # .
        j = _digits_end(buf, j + 1)
        if j < 0:
            return -1, 0, 0
        tag = FLOAT
    if j < n and (buf[j] == 101 or buf[j] == 69):  # e E
        j += 1
        if j < n and (buf[j] == 43 or buf[j] == 45):
            j += 1
        j = _digits_end(buf, j)
        if j < 0:
            return -1, 0, 0
        tag = FLOAT
    return j, tag, -value if negative else value


@kernel()
def _word_end(buf, i, word):  # pragma: no cover (compiled)
    n = len(word)
    if i + n > len(buf):
        return -1
    for k in range(n):
        if buf[i + k] != word[k]:
            return -1
    return i + n


_TRUE = np.frombuffer(b"true", dtype=np.uint8)
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)


@kernel()
def _scalar(buf, i):  # pragma: no cover (compiled)
    """A value that is not a container at ``i``: (end exclusive, tag, int value, value start, value end)."""
    c = buf[i]
    if c == 34:
        end, escaped = string_end(buf, i)
        if end < 0:
            return -1, 0, 0, 0, 0
        return end + 1, ESCAPED if escaped else STRING, 0, i + 1, end
    if c == 45 or 48 <= c <= 57:
        end, tag, value = number_end(buf, i)
        return end, tag, value, i, end
    if c == 110:
        end = _word_end(buf, i, _NULL)
        return end, NULL, 0, i, end
    if c == 116:
        end = _word_end(buf, i, _TRUE)
        return end, BOOL, 0, i, end
    if c == 102:
        end = _word_end(buf, i, _FALSE)
        return end, BOOL, 0, i, end
    return -1, 0, 0, 0, 0


@kernel()
def _container_end(buf, i, stack):  # pragma: no cover (compiled)
    """``buf[i]`` opens an object or array: the index after its close, validating what lies inside; -1: bad.
    ``stack``: room for the open containers (0 array, 1 object), as deep as they may nest."""
    n = len(buf)
    top = 0
    # state: 0 expecting a value (or a close right after opening), 1 after a value, 2 expecting a key
    stack[0] = 1 if buf[i] == 123 else 0
    top = 1
    i = skip_space(buf, i + 1)
    if i >= n:
        return -1
    if buf[i] == 125 or buf[i] == 93:
        if (buf[i] == 125) != (stack[0] == 1):
            return -1
        return i + 1
    state = 2 if stack[0] == 1 else 0
    while True:
        if i >= n:
            return -1
        if state == 2:  # a key, then a colon
            if buf[i] != 34:
                return -1
            end, _ = string_end(buf, i)
            if end < 0:
                return -1
            i = skip_space(buf, end + 1)
            if i >= n or buf[i] != 58:
                return -1
            i = skip_space(buf, i + 1)
            state = 0
            continue
        if state == 0:  # a value
            if i >= n:
                return -1
            c = buf[i]
            if c == 123 or c == 91:
                if top == len(stack):
                    return -1
                stack[top] = 1 if c == 123 else 0
                top += 1
                i = skip_space(buf, i + 1)
                if i >= n:
                    return -1
                if buf[i] == 125 or buf[i] == 93:
                    if (buf[i] == 125) != (stack[top - 1] == 1):
                        return -1
                    top -= 1
                    if top == 0:
                        return i + 1
                    i = skip_space(buf, i + 1)
                    state = 1
                    continue
                state = 2 if c == 123 else 0
                continue
            end, tag, _, _, _ = _scalar(buf, i)
            if end < 0:
                return -1
            i = skip_space(buf, end)
            state = 1
            continue
        # state 1: after a value: a comma or this container's close
        c = buf[i]
        if c == 44:
            i = skip_space(buf, i + 1)
            state = 2 if stack[top - 1] == 1 else 0
            continue
        if (c == 125 and stack[top - 1] == 1) or (c == 93 and stack[top - 1] == 0):
            top -= 1
            if top == 0:
                return i + 1
            i = skip_space(buf, i + 1)
            continue
        return -1


@kernel()
def value_end(buf, i, stack):  # pragma: no cover (compiled)
    """Any value at ``i``: (end exclusive, tag, int value, value start, value end); end -1: bad."""
    if i >= len(buf):
        return -1, 0, 0, 0, 0
    c = buf[i]
    if c == 123 or c == 91:
        end = _container_end(buf, i, stack)
        return end, CONTAINER, 0, i, end
    return _scalar(buf, i)
