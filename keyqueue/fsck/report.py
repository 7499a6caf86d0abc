"""What a check found (``CheckReport``), as text (``str``) and as JSON (``to_dict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from .analyse import KINDS, NOTE_KINDS, Finding

SHOWN = 20  # ids printed per line


@dataclass
class Problem:
    """One kind of finding and the ids (bucket numbers, key names) it concerns."""

    kind: str
    ids: list[str]
    detail: str
    repaired: bool = False

    def line(self) -> str:
        shown = " ".join(self.ids[:SHOWN])
        more = f" ... ({len(self.ids)} in all)" if len(self.ids) > SHOWN else ""
        done = " [repaired]" if self.repaired else ""
        return f"{self.kind}: {shown}{more} -- {self.detail}{done}"


@dataclass
class CheckReport:
    """What a check found; ``consistent`` is False while a problem is unrepaired."""

    queue: str
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    waiting: int = 0  # held messages included, as len() counts them
    held: int = 0  # grouped messages behind their group's current ones
    processing: int = 0
    delayed: int = 0
    dead: int = 0
    keys: int = 0  # keys of the queue found (0: it is empty or does not exist)
    complete: bool = True  # False: a core key has the wrong type, ids were not checked

    @classmethod
    def of(
        cls,
        queue: str,
        found: Sequence[Finding],
        repaired: Collection[Finding],
        states: Mapping[str, int],
        *,
        keys: int,
        complete: bool,
    ) -> CheckReport:
        """The report of confirmed findings (those ``repaired`` marked so), kind by kind in
        KINDS order, and the count of ids in each state."""
        report = cls(
            queue,
            waiting=states.get("waiting", 0) + states.get("held", 0),
            held=states.get("held", 0),
            processing=states.get("processing", 0),
            delayed=states.get("delayed", 0),
            dead=states.get("dead", 0),
            keys=keys,
            complete=complete,
        )
        for kind, detail in KINDS.items():
            for flag in (False, True):
                ids = [f.subject for f in found if f.kind == kind and (f in repaired) == flag]
                if ids:
                    (report.notes if kind in NOTE_KINDS else report.problems).append(Problem(kind, ids, detail, flag))
        return report

    @property
    def consistent(self) -> bool:
        return all(p.repaired for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        def rows(ps: list[Problem]) -> list[dict[str, Any]]:
            return [
                {"kind": p.kind, "ids": p.ids, "count": len(p.ids), "detail": p.detail, "repaired": p.repaired}
                for p in ps
            ]

        return {
            "queue": self.queue,
            "consistent": self.consistent,
            "complete": self.complete,
            "counts": {
                "waiting": self.waiting,
                "held": self.held,
                "processing": self.processing,
                "delayed": self.delayed,
                "dead": self.dead,
            },
            "keys": self.keys,
            "problems": rows(self.problems),
            "notes": rows(self.notes),
        }

    def __str__(self) -> str:
        lines = [p.line() for p in self.problems] + [f"note {p.line()}" for p in self.notes]
        left = sum(len(p.ids) for p in self.problems if not p.repaired)
        fixed = sum(len(p.ids) for p in self.problems if p.repaired)
        noted = sum(len(p.ids) for p in self.notes)
        verdict = "consistent" if self.consistent else f"INCONSISTENT ({left} unrepaired)"
        summary = (
            f"queue {self.queue!r}: {self.waiting} waiting{f' ({self.held} held)' if self.held else ''}, "
            f"{self.processing} processing, "
            f"{self.delayed} delayed, {self.dead} dead; {left + fixed} problems"
            f"{f' ({fixed} repaired)' if fixed else ''}, {noted} notes: {verdict}"
        )
        if not self.complete:
            summary += " (ids not checked: a core key has the wrong type)"
        elif not self.keys:
            summary += " (no keys: the queue is empty or does not exist)"
        return "\n".join(lines + [summary])
