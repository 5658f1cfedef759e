"""JSON text to values, with the bounds every consumer of the repository shares
(vectors/README.md, "Bounds"): a value nested deeper than MAX_DEPTH is ``too_deep``, one
that ends early ``truncated``, anything else that is not RFC 8259 JSON ``not_json``, the
first problem in the text deciding. Numbers: an integer within 64 bits is exact, any other
number a 64-bit float, and one beyond a float's range is not JSON."""

from __future__ import annotations

import json
import re
from typing import Any

# The bounds (vectors/README.md): the same numbers in every consumer.
MAX_DEPTH = 127
MAX_VALUES = 2_000_000
MAX_RECORD_BYTES = 16 << 20

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"')
# What a string may be when the text ends inside it.
_STRING_START = re.compile(r'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+(?:\\(?:u[0-9a-fA-F]{0,3})?)?\Z')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# What a number may be when the text ends inside it.
_NUMBER_START = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*|(?:\.[0-9]+)?[eE][+-]?[0-9]*)?)?\Z")
_ESCAPE = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\\\")
_LITERALS = ("true", "false", "null")


class JsonProblem(Exception):
    """Why a text is not a JSON value: ``reason`` is too_deep, truncated or not_json."""

    def __init__(self, reason: str, problem: str) -> None:
        super().__init__(problem)
        self.reason = reason


def _int(text: str) -> int | float:
    n = int(text)
    return n if -(1 << 63) <= n < (1 << 64) else float(text)


def parse(data: bytes | str) -> Any:
    """The JSON value of ``data``, or JsonProblem."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonProblem("not_json", f"not UTF-8: {e}") from e
    check(data)
    return json.loads(data, parse_int=_int)


def check(t: str) -> None:
    """Raises JsonProblem at the first problem of ``t``, in text order."""
    end = len(t)

    def fail(reason: str, what: str, at: int) -> JsonProblem:
        return JsonProblem(reason, f"{what} at character {at}")

    def ws(i: int) -> int:
        return _WS.match(t, i).end()

    def string(i: int) -> int:
        m = _STRING.match(t, i)
        if m is None:
            if _STRING_START.match(t, i):
                raise fail("truncated", "the text ends in a string", end)
            raise fail("not_json", "a bad string", i)
        for e in _ESCAPE.finditer(t, i, m.end()):
            if e.group(0) != "\\\\" and (e.group(1) is None or e.group(2) is None):
                raise fail("not_json", "a lone surrogate escape", e.start())
        return m.end()

    def scalar(i: int) -> int:
        c = t[i]
        if c == '"':
            return string(i)
        if c == "-" or "0" <= c <= "9":
            m = _NUMBER.match(t, i)
            j = m.end() if m else i
            k = j
            while k < end and t[k] in "0123456789+-.eE":
                k += 1
            if k == end and j < end and _NUMBER_START.match(t, i):
                raise fail("truncated", "the text ends in a number", end)
            if m is None:
                raise fail("not_json", "a bad number", i)
            if abs(float(m.group(0))) == float("inf"):
                raise fail("not_json", "a number beyond a 64-bit float", i)
            return j
        for lit in _LITERALS:
            if t.startswith(lit, i):
                return i + len(lit)
            if lit.startswith(t[i:]):
                raise fail("truncated", "the text ends in a literal", end)
        raise fail("not_json", f"unexpected {t[i]!r}", i)

    # Each open container: "[" or "{", and whether a member or element was read.
    stack: list[str] = []
    i = ws(0)
    expect_value = True
    while True:
        if expect_value:
            if i == end:
                raise fail("truncated", "the text ends before a value", end)
            c = t[i]
            if c in "[{":
                if len(stack) >= MAX_DEPTH:
                    raise fail("too_deep", f"nested deeper than {MAX_DEPTH} levels", i)
                stack.append(c)
                i = ws(i + 1)
                if i < end and t[i] == ("]" if c == "[" else "}"):
                    stack.pop()
                    i += 1
                    expect_value = False
                elif c == "{":
                    i = _key(t, i, end, string, ws, fail)
                continue
            i = scalar(i)
            expect_value = False
            continue
        i = ws(i)
        if not stack:
            if i != end:
                raise fail("not_json", "text after the value", i)
            return
        if i == end:
            raise fail("truncated", "the text ends in a container", end)
        c = t[i]
        if c == ",":
            i = ws(i + 1)
            if stack[-1] == "{":
                i = _key(t, i, end, string, ws, fail)
            expect_value = True
        elif c == ("]" if stack[-1] == "[" else "}"):
            stack.pop()
            i += 1
        else:
            raise fail("not_json", f"unexpected {c!r}", i)


def _key(t, i, end, string, ws, fail) -> int:
    """A member's name and its colon, from ``i``: the position of its value."""
    if i == end:
        raise fail("truncated", "the text ends before a member", end)
    if t[i] != '"':
        raise fail("not_json", "a member without a string name", i)
    i = ws(string(i))
    if i == end:
        raise fail("truncated", "the text ends after a member's name", end)
    if t[i] != ":":
        raise fail("not_json", "a member without a colon", i)
    return ws(i + 1)


def measure(v: Any) -> tuple[int, int]:
    """How many JSON values ``v`` holds (itself included), and its depth (0 for a scalar,
    1 for ``{}`` or ``[1]``)."""
    if isinstance(v, dict):
        items: Any = v.values()
    elif isinstance(v, list):
        items = v
    else:
        return 1, 0
    count, deepest = 1, 0
    for x in items:
        if isinstance(x, (dict, list)):
            c, d = measure(x)
            count += c
            deepest = max(deepest, d)
        else:
            count += 1
    return count, deepest + 1


def clone(v: Any) -> Any:
    """A copy of a JSON value (faster than copy.deepcopy)."""
    if isinstance(v, dict):
        return {k: clone(x) if isinstance(x, (dict, list)) else x for k, x in v.items()}
    if isinstance(v, list):
        return [clone(x) if isinstance(x, (dict, list)) else x for x in v]
    return v


def same(a: Any, b: Any) -> bool:
    """JSON equality: an integer is never equal to a float, nor a boolean to a number;
    member order does not count."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
