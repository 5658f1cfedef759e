"""Repeats told apart from new events in memory that does not grow with the stream.

The event contract's repeat is exact (same id, same content) and never arrives after a
newer event of the same key: a repeat is the last event of its object, or of its marker
scope, while the consumer holds that, and otherwise one of the latest ids (``Window``).
"""

from __future__ import annotations

DEFAULT_REPEAT_WINDOW = 100_000
"""How many of the latest event ids a ``Consumer`` remembers beyond the last id of each
object and marker scope it holds: the most events deltaship keeps unacknowledged on a route
(``delivery.max_in_flight`` at its maximum). A repeat on Kafka (a route without transactions,
through a broker restart) is a re-send of one of those, so fewer come between it and its
original."""


class Window:
    """The latest event ids, in two generations of at most ``size`` ids each: when the
    current one is full it becomes the previous one and the oldest is dropped, so the latest
    ``size`` ids are always remembered and never more than ``2 * size``."""

    def __init__(self, size: int = DEFAULT_REPEAT_WINDOW) -> None:
        if size < 1:
            raise ValueError(f"a repeat window of {size} ids remembers nothing; give at least 1")
        self.size = size
        self._current: set[tuple[int, str]] = set()
        self._previous: set[tuple[int, str]] = set()

    def __contains__(self, id: tuple[int, str]) -> bool:
        return id in self._current or id in self._previous

    def add(self, id: tuple[int, str]) -> None:
        if len(self._current) >= self.size:
            self._previous, self._current = self._current, set()
        self._current.add(id)

    def generations(self) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
        """The previous and the current generation (for a snapshot)."""
        return self._previous, self._current

    def restore(self, previous: set[tuple[int, str]], current: set[tuple[int, str]]) -> None:
        """Takes back the generations a snapshot kept."""
        self._previous, self._current = previous, current

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
