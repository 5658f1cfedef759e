"""RFC 6902 JSON Patch, applied as `deltaship rebuild` applies it (vectors/README.md,
"JSON Patch"): all or nothing, and refused before any operation that would make the object
hold more than MAX_VALUES values or nest deeper than MAX_DEPTH, or that leaves something
other than an object."""

from __future__ import annotations

import re
from typing import Any

from .jsontext import MAX_DEPTH, MAX_VALUES, clone, measure, same

_FIELDS = {"add": ("path", "value"), "remove": ("path",), "replace": ("path", "value"), "move": ("from", "path"), "copy": ("from", "path"), "test": ("path", "value")}
_POINTER = re.compile(r"(?:/(?:[^~/]|~[01])*)*\Z")
_INDEX = re.compile(r"(?:0|[1-9][0-9]*)\Z")


class NotAPatch(Exception):
    """The data is not a JSON Patch (``wrong_type``)."""


class NotApplied(Exception):
    """The patch does not apply to the object (``patch_not_applied``)."""


def operations(data: Any) -> list[dict]:
    """The operations of a JSON Patch, checked for their members, or NotAPatch."""
    if not isinstance(data, list):
        raise NotAPatch("the data is not a JSON Patch: not an array")
    for n, op in enumerate(data):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or op["op"] not in _FIELDS:
            raise NotAPatch(f"the data is not a JSON Patch: operation {n} has no known op")
        for name in _FIELDS[op["op"]]:
            if name not in op:
                raise NotAPatch(f"the data is not a JSON Patch: operation {n} has no {name}")
            if name in ("path", "from") and not (isinstance(op[name], str) and _POINTER.match(op[name])):
                raise NotAPatch(f"the data is not a JSON Patch: operation {n}'s {name} is not a JSON Pointer")
    return data


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _get(doc: Any, pointer: str) -> tuple[bool, Any]:
    """(found, value) at ``pointer``."""
    if pointer == "":
        return True, doc
    if not pointer.startswith("/"):
        return False, None
    for t in _tokens(pointer):
        if isinstance(doc, dict) and t in doc:
            doc = doc[t]
        elif isinstance(doc, list) and _INDEX.match(t) and int(t) < len(doc):
            doc = doc[int(t)]
        else:
            return False, None
    return True, doc


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    parent_pointer, _, last = pointer.rpartition("/")
    found, parent = _get(doc, parent_pointer)
    if not found or not isinstance(parent, (dict, list)):
        raise NotApplied(f"no parent for {pointer}")
    return parent, last.replace("~1", "/").replace("~0", "~")


def _index(token: str, length: int, past_end: bool) -> int:
    if token == "-":
        index = length
    elif _INDEX.match(token):
        index = int(token)
    else:
        raise NotApplied(f"{token!r} is not an array index")
    if index > length or index == length and not past_end:
        raise NotApplied(f"index {token} is out of bounds")
    return index


def _add(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict):
        parent[last] = value
    else:
        parent.insert(_index(last, len(parent), True), value)
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    if pointer == "":
        raise NotApplied("cannot remove the whole document")
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict):
        if last not in parent:
            raise NotApplied(f"nothing at {pointer}")
        return parent.pop(last)
    return parent.pop(_index(last, len(parent), False))


def _inside(path: str, start: str) -> bool:
    """``path`` is below ``start`` (token-wise)."""
    return path.startswith(start) and len(path) > len(start) and path[len(start)] == "/"


def _apply(doc: Any, op: dict) -> Any:
    kind, path = op["op"], op["path"]
    if kind == "add":
        return _add(doc, path, clone(op["value"]))
    if kind == "remove":
        _remove(doc, path)
        return doc
    if kind == "replace":
        found, _ = _get(doc, path)
        if not found:
            raise NotApplied(f"nothing at {path}")
        if path == "":
            return clone(op["value"])
        parent, last = _parent(doc, path)
        parent[int(last) if isinstance(parent, list) else last] = clone(op["value"])
        return doc
    if kind == "move":
        if _inside(path, op["from"]):
            raise NotApplied("cannot move a value inside itself")
        return _add(doc, path, _remove(doc, op["from"]))
    if kind == "copy":
        found, value = _get(doc, op["from"])
        if not found:
            raise NotApplied(f"nothing at {op['from']}")
        return _add(doc, path, clone(value))
    found, value = _get(doc, path)
    if not found:
        raise NotApplied(f"nothing at {path}")
    if not same(value, op["value"]):
        raise NotApplied(f"test failed at {path}")
    return doc


def patched(stored: Any, ops: list[dict]) -> Any:
    """``stored`` with ``ops`` applied (``stored`` is left as it was), or NotApplied."""
    doc = clone(stored)
    values = measure(doc)[0]
    for op in ops:
        kind = op["op"]
        if kind in ("add", "replace", "copy", "move"):
            found, source = (True, op["value"]) if kind in ("add", "replace") else _get(doc, op["from"])
            count, deep = measure(source) if found else (0, 0)
            # Values only grow by what is added, replaced in or copied (an upper bound).
            values += 0 if kind == "move" else count
            if values > MAX_VALUES:
                raise NotApplied(f"the patch would make the object hold more than {MAX_VALUES} JSON values")
            if op["path"].count("/") + deep > MAX_DEPTH:
                raise NotApplied(f"the patch would nest the object deeper than {MAX_DEPTH} levels")
        elif values > MAX_VALUES:
            raise NotApplied(f"the patch would make the object hold more than {MAX_VALUES} JSON values")
        doc = _apply(doc, op)
    if not isinstance(doc, dict):
        raise NotApplied("the patch would make the object something other than an object")
    return doc
