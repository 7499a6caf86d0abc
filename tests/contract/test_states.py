"""The id-state rules are one function (core/states.owed) for the reaper and the fsck: every
combination of what an id can look like gets the same state from both, and the reaper's
act leads there. (reap.lua mirrors the rules; the crash-point suite runs it against them.)"""

from __future__ import annotations

import itertools

from keyqueue.core.states import Act, Seen, decide, owed
from keyqueue.fsck.analyse import plan
from keyqueue.fsck.scan import IdView
from keyqueue.keys import QueueKeys

K = QueueKeys("kq", "q")
NOW, BUCKET_MS = 10_000, 1_000

#: What each reaper act can mean for the state the fsck sees.
FITS = {
    "processing": {Act.KEEP, Act.EXPIRE},
    "delayed": {Act.KEEP, Act.RELEASE},
    "waiting": {Act.KEEP, Act.DROP, Act.RELEASE},
    "dead": {Act.KEEP, Act.DROP},
    "gone": {Act.KEEP, Act.FORGET},
    "claiming": {Act.KEEP},
}


def combos():  # type: ignore[no-untyped-def]
    for receipt, timer, processing, waiting, dead, timed, settled in itertools.product(
        (False, True),
        (None, NOW - 500, NOW + 500),
        (False, True),
        (False, True),
        (False, True),
        (False, True),
        (False, True),
    ):
        if timer is None and timed:
            continue  # no timer, no timer entry of its own
        yield receipt, timer, processing, waiting, dead, timed, settled


def test_the_reaper_and_the_fsck_agree_on_every_id() -> None:
    n = 0
    for receipt, timer, processing, waiting, dead, timed, settled in combos():
        seen = Seen(True, receipt, timer, processing, waiting, dead=dead, timed=timed)
        state, _ = owed(seen, settled)
        view = IdView(
            "7",
            True,
            receipt,
            timer,
            waiting,
            processing,
            listed=1 if waiting else 0,
            dead=int(dead),
            timed=timed,
            intent=not settled,
        )
        fsck = plan(view, K, BUCKET_MS)
        assert fsck.state == ("processing" if state == "claiming" else state), (seen, settled)
        bucket_end = NOW + 1 if not settled else NOW - 1
        act = decide(seen, NOW, bucket_end).act
        assert act in FITS[state or "gone"], (seen, settled, state, act)
        n += 1
    assert n > 150


def test_the_corner_they_used_to_disagree_on() -> None:
    # Owned without a receipt (an abandoned claim), with a timer, and in the dead list: the
    # reaper released it at its time ("delayed") while the fsck called it dead.
    seen = Seen(True, receipt=False, timer=NOW - 1, processing=True, waiting=False, dead=True)
    assert owed(seen, settled=True) == ("delayed", True)
    d = decide(seen, NOW, NOW - 1)
    assert d.act is Act.RELEASE and d.unclaim
    view = IdView("7", True, False, NOW - 1, False, True, 0, dead=1, timed=True)
    assert plan(view, K, BUCKET_MS).state == "delayed"
    # A dead message with a stray timer, met in another bucket's set: a stale entry to drop,
    # never a release (which would deliver a dead letter).
    stray = Seen(True, receipt=False, timer=NOW - 1, processing=False, waiting=False, dead=True, timed=False)
    assert owed(stray, settled=True) == ("dead", False)
    assert decide(stray, NOW, NOW - 1).act is Act.DROP
