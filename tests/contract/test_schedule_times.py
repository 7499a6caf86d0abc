"""Fire times without Redis: keyqueue.next_fires and what one fire of a schedule does."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from keyqueue import InvalidSchedule, KeyQueueError, next_fires
from keyqueue.core.schedules import CRON_CACHED_STEPS, definition, fire_times_ms, jitter_ms, plan_fire

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
UTC = timezone.utc


def wall(times: list[datetime]) -> list[str]:
    return [t.isoformat() for t in times]


def test_five_fields_in_a_zone() -> None:
    got = next_fires(cron="0 9 * * 1-5", tz="Europe/Berlin", after=datetime(2026, 1, 2, 9, 0, tzinfo=BERLIN), count=3)
    assert wall(got) == ["2026-01-05T09:00:00+01:00", "2026-01-06T09:00:00+01:00", "2026-01-07T09:00:00+01:00"]


def test_six_fields_have_seconds_first() -> None:
    got = next_fires(cron="15 0 12 * * *", after=datetime(2026, 5, 1, tzinfo=UTC), count=2)
    assert wall(got) == ["2026-05-01T12:00:15+00:00", "2026-05-02T12:00:15+00:00"]


def test_times_are_strictly_after_and_aware() -> None:
    after = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    got = next_fires(cron="0 12 * * *", after=after, count=1)
    assert got == [datetime(2026, 5, 2, 12, 0, tzinfo=UTC)]
    assert got[0].tzinfo is not None


def test_spring_forward_fires_once_at_the_end_of_the_gap() -> None:
    """Berlin skips 02:00-03:00 on 2026-03-29: 02:30 fires at 03:00 CEST, once."""
    after = datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN)
    daily = next_fires(cron="30 2 * * *", tz="Europe/Berlin", after=after, count=2)
    assert wall(daily) == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    quarter = next_fires(
        cron="*/15 * * * *", tz="Europe/Berlin", after=datetime(2026, 3, 29, 1, 30, tzinfo=BERLIN), count=4
    )
    assert wall(quarter) == [
        "2026-03-29T01:45:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:15:00+02:00",
        "2026-03-29T03:30:00+02:00",
    ]


def test_fall_back_fires_once_at_the_first_occurrence() -> None:
    """Berlin repeats 02:00-03:00 on 2026-10-25: each wall time of it fires once, on its first pass."""
    after = datetime(2026, 10, 25, 1, 30, tzinfo=BERLIN)
    got = next_fires(cron="*/30 * * * *", tz="Europe/Berlin", after=after, count=4)
    assert wall(got) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T03:00:00+01:00",
        "2026-10-25T03:30:00+01:00",
    ]
    # Asked from inside the second pass: nothing of the repeated hour fires again.
    second_pass = datetime(2026, 10, 25, 0, 45, tzinfo=UTC)  # 01:45 UTC = 02:45 CET, second pass
    assert wall(next_fires(cron="*/30 * * * *", tz="Europe/Berlin", after=second_pass, count=1)) == [
        "2026-10-25T03:00:00+01:00"
    ]


def test_new_york_dst_days_of_2026() -> None:
    spring = next_fires(
        cron="30 2 * * *", tz="America/New_York", after=datetime(2026, 3, 7, 12, tzinfo=NEW_YORK), count=3
    )
    assert wall(spring) == ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]
    fall = next_fires(
        cron="30 1 * * *", tz="America/New_York", after=datetime(2026, 10, 31, 12, tzinfo=NEW_YORK), count=3
    )
    assert wall(fall) == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00", "2026-11-03T01:30:00-05:00"]
    hourly = next_fires(
        cron="0 * * * *", tz="America/New_York", after=datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK), count=3
    )
    assert [t.astimezone(UTC).hour for t in hourly] == [5, 7, 8]  # 01:00 EDT once, then 02:00 and 03:00 EST


def test_every_is_anchored_at_start_without_drift() -> None:
    start = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    got = next_fires(every=7, start=start, after=datetime(2026, 1, 1, 1, 0, 0, 500000, tzinfo=UTC), count=3)
    base = start.timestamp()
    assert [(t.timestamp() - base) / 7 for t in got] == [515, 516, 517]
    before_start = next_fires(every=60, start=start, after=datetime(2025, 12, 31, tzinfo=UTC), count=1)
    assert before_start == [start]


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"cron": "* * * * *", "every": 5},
        {"cron": "61 * * * *"},
        {"cron": "* * * *"},
        {"cron": "* * * * * * *"},
        {"cron": "* * * * *", "tz": "Mars/Olympus"},
        {"every": 0.5},
        {"every": "5"},
    ],
)
def test_bad_input_is_invalid_schedule(kw: dict[str, object]) -> None:
    with pytest.raises(InvalidSchedule) as info:
        next_fires(after=datetime(2026, 1, 1, tzinfo=UTC), count=1, **kw)  # type: ignore[arg-type]
    assert isinstance(info.value, KeyQueueError) and isinstance(info.value, ValueError)


def test_after_must_be_aware() -> None:
    with pytest.raises(ValueError):
        next_fires(every=5, after=datetime(2026, 1, 1), count=1)


def test_end_before_start_is_refused() -> None:
    with pytest.raises(InvalidSchedule):
        definition(cron=None, every=5, tz="UTC", start=100, end=100, jitter=0, catch_up="one", misfire_grace=None)
    with pytest.raises(InvalidSchedule):
        definition(cron=None, every=5, tz="UTC", start=None, end=None, jitter=0, catch_up="some", misfire_grace=None)


def every(seconds: float, **kw: object) -> object:
    args = {"cron": None, "every": seconds, "tz": "UTC", "start": 0, "end": None, "jitter": 0, "catch_up": "one"}
    args["misfire_grace"] = None
    args.update(kw)
    return definition(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("catch_up", "fired", "missed"),
    [("one", [50_000], 4), ("all", [10_000, 20_000, 30_000, 40_000, 50_000], 0), ("none", [50_000], 4)],
)
def test_catch_up_of_five_missed_fire_times(catch_up: str, fired: list[int], missed: int) -> None:
    d = every(10, catch_up=catch_up)
    fire = plan_fire("s", d, 0, 10_000, 51_000)  # type: ignore[arg-type]
    assert [f for f, _ in fire.messages] == fired
    assert fire.missed == missed and fire.next_ms == 60_000


def test_catch_up_none_skips_a_late_current_fire_time() -> None:
    fire = plan_fire("s", every(60, catch_up="none"), 0, 60_000, 119_000)  # type: ignore[arg-type]
    assert fire.messages == [] and fire.missed == 1 and fire.next_ms == 120_000


def test_misfire_grace_skips_old_fire_times_whatever_catch_up() -> None:
    fire = plan_fire("s", every(10, catch_up="all", misfire_grace=25), 0, 10_000, 51_000)  # type: ignore[arg-type]
    assert [f for f, _ in fire.messages] == [30_000, 40_000, 50_000]
    assert fire.missed == 2


def test_catch_up_all_is_bounded() -> None:
    fire = plan_fire("s", every(1, catch_up="all"), 0, 1_000, 5_000_000)  # type: ignore[arg-type]
    assert len(fire.messages) == 1000 and fire.messages[-1][0] == 5_000_000
    assert fire.missed == 5_000 - 1000 and fire.next_ms == 5_001_000


def test_end_stops_the_schedule() -> None:
    fire = plan_fire("s", every(10, end=30), 0, 30_000, 45_000)  # type: ignore[arg-type]
    assert [f for f, _ in fire.messages] == [30_000] and fire.next_ms is None


def test_jitter_is_a_function_of_id_and_fire_time() -> None:
    offsets = {jitter_ms("s", t, 10_000) for t in range(0, 100_000, 1000)}
    assert all(0 <= o < 10_000 for o in offsets) and len(offsets) > 50
    assert jitter_ms("s", 5000, 10_000) == jitter_ms("s", 5000, 10_000)
    assert jitter_ms("s", 5000, 10_000) != jitter_ms("t", 5000, 10_000)
    fire = plan_fire("s", every(10, jitter=3), 0, 10_000, 10_500)  # type: ignore[arg-type]
    assert fire.messages == [(10_000, 10_000 + jitter_ms("s", 10_000, 3000))]


def test_start_and_end_take_aware_datetimes_or_epoch_seconds() -> None:
    aware = definition(
        cron=None,
        every=5,
        tz="UTC",
        start=datetime(2026, 1, 1, 1, tzinfo=BERLIN),
        end=1767225600.5,
        jitter=0,
        catch_up="one",
        misfire_grace=None,
    )
    assert (aware.start_ms, aware.end_ms) == (1767225600000, 1767225600500)
    with pytest.raises(InvalidSchedule):
        definition(
            cron=None,
            every=5,
            tz="UTC",
            start=datetime(2026, 1, 1),
            end=None,
            jitter=0,
            catch_up="one",
            misfire_grace=None,
        )


def test_a_fire_of_one_due_time_matches_stepping_through_the_fire_times() -> None:
    """The one-due-time shortcut of plan_fire (every) gives what fire_times_ms gives, on and
    off the interval's grid, at an end and before a start."""
    for d, nxt, now in [
        (every(10), 30_000, 30_000),
        (every(10), 30_000, 39_999),
        (every(10, start=5), 35_000, 36_000),
        (every(10, end=40), 40_000, 41_000),
        (every(10), 30_500, 35_000),  # off the grid: the next is the grid's
        (every(10, start=100), 50_000, 60_000),  # before start: the first is start
    ]:
        fire = plan_fire("s", d, 0, nxt, now)  # type: ignore[arg-type]
        assert fire.messages == [(nxt, nxt)]
        assert fire.next_ms == next(fire_times_ms(d, 0, nxt), None)  # type: ignore[arg-type]


def test_cron_fire_times_step_on_past_the_ones_worked_out_one_at_a_time() -> None:
    """Thirty fire times across Berlin's spring-forward gap: each once, in order, as CronSim
    steps them (the first CRON_CACHED_STEPS one by one, the rest in one go)."""
    after = datetime(2026, 3, 29, 0, 0, tzinfo=BERLIN)
    got = next_fires(cron="*/15 * * * *", tz="Europe/Berlin", after=after, count=30)
    assert len(got) == 30 > CRON_CACHED_STEPS
    # every 15 minutes of time (the gap is an hour of wall time only)
    assert all(b.timestamp() - a.timestamp() == 900 for a, b in zip(got, got[1:]))
    assert wall(got[6:8]) == ["2026-03-29T01:45:00+01:00", "2026-03-29T03:00:00+02:00"]
