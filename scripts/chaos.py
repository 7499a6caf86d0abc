"""A bounded chaos soak of keyqueue on loopback.

    .venv/bin/python scripts/chaos.py --messages 3000 [--workers 3] [--producers 2]
        [--seconds-between-kills 1.0] [--rate 500] [--no-scripting] [--json]

It starts its own redis-server (``--appendonly yes --appendfsync always``, a free port,
never 6379; with ``--failover [--min-replicas N]`` a primary, two replicas and three
sentinels instead, everyone connecting through a ``redis+sentinel://`` URL, and the one
crash a SIGKILL of the primary that the sentinels fail over; ``--cut-replication S``
first cuts its replication link for S seconds, as a partition would), producer threads that enqueue ``--messages`` unique JSON payloads in small
batches, ``--workers`` ``keyqueue worker`` processes (``-c 2``, handler
``scripts/chaos_handler.py``) and a ``keyqueue reaper``. About every
``--seconds-between-kills`` a random worker that has been handling messages for 3 s at least
(now and then the reaper, once it has run 3 s) is SIGKILLed and restarted; the redis-server itself is SIGKILLed and restarted twice, at about 1/3 and 2/3
of production. When every payload acknowledged by an enqueue call has been processed (or
the deadline passes), everything is stopped with SIGTERM and audited:

- lost: acknowledged by enqueue but never processed (must be 0),
- duplicates: deliveries beyond the first, with their likely cause,
- orphaned: ``item:<id>`` hashes referenced by no state of the queue (must be 0).

Exit status 0 only when nothing is lost, nothing is orphaned and every payload was
acknowledged; 1 otherwise; 2 on bad usage. With ``--json`` the progress and the report go
to stderr and stdout holds one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # keyqueue from the checkout even when it is not installed

from chaos_handler import DELIVERIES, DONE, LOG, WORKING  # noqa: E402  (scripts/ is sys.path[0])
from keyqueue import Queue  # noqa: E402
from keyqueue.connection import TRANSIENT, from_url  # noqa: E402
from keyqueue.errors import KeyQueueError, NotReplicated  # noqa: E402
from keyqueue.server import RedisServer  # noqa: E402

QUEUE = "chaos"
VISIBILITY = 3.0
CONCURRENCY = 2
GRACE = 5.0
REAPER_EVERY = 4  # every 4th kill hits the reaper instead of a worker
#: A worker is killed only once it has been seen handling messages this long (the reaper
#: once it has run this long): on a slow machine a worker takes seconds to start, and kills
#: of workers still starting, or just started, would leave nobody working.
MIN_AGE = 3.0
REDIS_EXTRA = ["--appendonly", "yes", "--appendfsync", "always"]


# -- producers ----------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the producers know: payloads acknowledged by an enqueue call, and retries."""

    acked: set[int] = field(default_factory=set)
    ids: dict[str, int] = field(default_factory=dict)  # message id returned -> payload n
    retried_batches: int = 0
    retried_payloads: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    finished: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


class Producer(threading.Thread):
    """Enqueues its share of payloads in batches at its share of the rate. A batch counts
    only when enqueue returned; on a transient error the same batch is retried after a
    back-off (it may have landed already: then it is enqueued twice)."""

    def __init__(
        self,
        index: int,
        numbers: list[int],
        queue: Queue,
        ledger: Ledger,
        batch: int,
        rate: float,
        run_id: str,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index, self.numbers, self.queue, self.ledger = index, numbers, queue, ledger
        self.batch, self.rate, self.run_id, self.stop = batch, rate, run_id, stop

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # recorded and reported: the run fails
            with self.ledger.lock:
                self.ledger.errors.append(f"{self.name}: {type(exc).__name__}: {exc}")
        finally:
            with self.ledger.lock:
                self.ledger.finished += 1

    def _produce(self) -> None:
        rng = random.Random(f"{self.run_id}-{self.index}")
        next_at = time.monotonic()
        for start in range(0, len(self.numbers), self.batch):
            if self.stop.is_set():
                return
            chunk = self.numbers[start : start + self.batch]
            bodies = [json.dumps({"n": n, "nonce": f"{self.run_id}-{rng.getrandbits(32):08x}"}) for n in chunk]
            if self.rate > 0:
                next_at += len(chunk) / self.rate
                self.stop.wait(max(0.0, next_at - time.monotonic()))
            failures = 0
            while True:
                try:
                    ids = self.queue.enqueue_many(bodies) if len(bodies) > 1 else [self.queue.enqueue(bodies[0])]
                    break
                except (*TRANSIENT, NotReplicated):  # not acknowledged: the batch is sent again
                    failures += 1
                    with self.ledger.lock:
                        self.ledger.retried_batches += 1
                        self.ledger.retried_payloads.update(chunk)
                    if self.stop.wait(min(0.05 * 2**failures, 1.0)):
                        return
            with self.ledger.lock:
                self.ledger.acked.update(chunk)
                self.ledger.ids.update(zip(ids, chunk))


# -- worker and reaper processes ----------------------------------------------------------


@dataclass
class Event:
    kind: str  # "worker" or "reaper"
    pid: int
    at: float  # epoch seconds
    code: int | None = None


class Fleet:
    """The worker and reaper processes: each in its own process group, stderr to a log."""

    def __init__(self, url: str, workers: int, scripting: bool, logdir: Path, work_ms: float) -> None:
        self.url, self.scripting, self.logdir = url, scripting, logdir
        self.env = dict(
            os.environ,
            CHAOS_WORK_MS=str(work_ms),
            PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        )
        self.spawned = 0
        self.all: list[subprocess.Popen[bytes]] = []
        self.born: dict[int, float] = {}  # pid: when it was started (monotonic)
        self.spawn_of: dict[int, str] = {}  # pid: the number of its spawn (CHAOS_SPAWN)
        self.working: dict[str, float] = {}  # spawn: when it was first seen handling a message
        self.workers: list[subprocess.Popen[bytes]] = [self._spawn("worker") for _ in range(workers)]
        self.reaper = self._spawn("reaper")
        self.kills: list[Event] = []
        self.unexpected: list[Event] = []

    def _spawn(self, kind: str) -> subprocess.Popen[bytes]:
        base = [sys.executable, "-m", "keyqueue", "--url", self.url]
        if not self.scripting:
            base.append("--no-scripting")
        if kind == "worker":
            args = [
                *base,
                "worker",
                "chaos_handler:handle",
                "-q",
                QUEUE,
                "-c",
                str(CONCURRENCY),
                "--grace",
                str(GRACE),
                "--log-level",
                "warning",
            ]
        else:
            args = [*base, "reaper", QUEUE, "--interval", "0.5", "--log-level", "warning"]
        self.spawned += 1
        with open(self.logdir / f"{kind}-{self.spawned:04d}.log", "wb") as err:
            p = subprocess.Popen(
                args,
                cwd=ROOT,
                env=dict(self.env, CHAOS_SPAWN=str(self.spawned)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        self.all.append(p)
        self.born[p.pid] = time.monotonic()
        self.spawn_of[p.pid] = str(self.spawned)
        return p

    @staticmethod
    def _signal(p: subprocess.Popen[bytes], sig: int) -> None:
        try:
            os.killpg(p.pid, sig)  # its own session: the group is the process and its children
        except ProcessLookupError:
            pass

    def seen_working(self, spawns: set[str]) -> None:
        """Note when each worker was first seen to have handled a message (by its spawn's
        number, not its pid, which a later worker may be given again)."""
        now = time.monotonic()
        for w in self.workers:
            spawn = self.spawn_of[w.pid]
            if spawn in spawns:
                self.working.setdefault(spawn, now)

    def kill_one(self, rng: random.Random, tick: int) -> Event | None:
        """SIGKILL a random worker that has been working for MIN_AGE at least (every
        REAPER_EVERY-th time the reaper, once it has run MIN_AGE), and restart it; None when
        none has."""
        now = time.monotonic()
        if tick % REAPER_EVERY == REAPER_EVERY - 1:
            if now - self.born[self.reaper.pid] < MIN_AGE:
                return None
            victim, kind = self.reaper, "reaper"
        else:
            old = [
                i for i, w in enumerate(self.workers) if now - self.working.get(self.spawn_of[w.pid], now) >= MIN_AGE
            ]
            if not old:
                return None
            i = rng.choice(old)
            victim, kind = self.workers[i], "worker"
        event = Event(kind, victim.pid, time.time())
        self._signal(victim, signal.SIGKILL)
        event.code = victim.wait()
        if kind == "reaper":
            self.reaper = self._spawn("reaper")
        else:
            self.workers[i] = self._spawn("worker")
        self.kills.append(event)
        return event

    def respawn_dead(self) -> None:
        """A process that exited by itself (e.g. it started while Redis was down) is recorded
        and restarted."""
        for i, p in enumerate(self.workers):
            if p.poll() is not None:
                self.unexpected.append(Event("worker", p.pid, time.time(), p.returncode))
                self.workers[i] = self._spawn("worker")
        if self.reaper.poll() is not None:
            self.unexpected.append(Event("reaper", self.reaper.pid, time.time(), self.reaper.returncode))
            self.reaper = self._spawn("reaper")

    def stop(self, timeout: float = GRACE + 15.0) -> dict[str, list[int | None]]:
        """SIGTERM the live processes, wait for them, SIGKILL what is left at the deadline."""
        live = [*self.workers, self.reaper]
        for p in live:
            if p.poll() is None:
                self._signal(p, signal.SIGTERM)
        end = time.monotonic() + timeout
        for p in live:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.wait()
        return {"workers": [p.returncode for p in self.workers], "reaper": [self.reaper.returncode]}

    def kill_all(self) -> None:
        for p in self.all:
            if p.poll() is None:
                self._signal(p, signal.SIGKILL)
        for p in self.all:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


# -- audit --------------------------------------------------------------------------------


def text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def scan_keys(client: redis.Redis, pattern: str) -> list[bytes]:
    return [bytes(key) for key in client.scan_iter(match=pattern, count=1000)]


def orphan_check(client: redis.Redis, q: Queue) -> dict[str, Any]:
    """Every ``item:<id>`` hash must be referenced by a state: waiting (queue list, items
    set), processing, a timer bucket, or dead."""
    k = q.keys
    keys = scan_keys(client, k.pattern)
    item_prefix = k.item("").encode()
    timer_prefix = k.timer(0)[:-1].encode()
    items = {key[len(item_prefix) :].decode() for key in keys if key.startswith(item_prefix)}
    timers = [key for key in keys if key.startswith(timer_prefix)]
    referenced: set[str] = set()
    for ids in (
        client.lrange(k.queue, 0, -1),
        client.smembers(k.items),
        client.smembers(k.processing),
        client.lrange(k.dead, 0, -1),
        *(client.smembers(t) for t in timers),
    ):
        referenced.update(text(i) for i in ids)
    orphaned = sorted(items - referenced, key=int)
    dangling = sorted(referenced - items, key=int)
    return {
        "keys": len(keys),
        "item_hashes": len(items),
        "timer_buckets": len(timers),
        "orphaned": len(orphaned),
        "orphaned_ids": orphaned[:20],
        "dangling_refs": len(dangling),
        "dangling_ids": dangling[:20],
    }


def classify(
    log: list[str], killed: dict[int, float], died: dict[int, float], crashes: list[tuple[float, float]]
) -> dict[str, int]:
    """Explain each delivery beyond the first of a payload, from the delivery log."""
    by_n: dict[int, list[tuple[float, str, int]]] = {}
    for entry in log:
        f = entry.split()  # message id, n, pid, receives, epoch seconds
        by_n.setdefault(int(f[1]), []).append((float(f[4]), f[0], int(f[2])))
    causes = {"worker_sigkill": 0, "worker_died": 0, "redis_crash": 0, "visibility_expiry": 0, "enqueued_twice": 0}
    for deliveries in by_n.values():
        if len(deliveries) < 2:
            continue
        deliveries.sort()
        last_of: dict[str, tuple[float, int]] = {}
        for i, (t, mid, pid) in enumerate(deliveries):
            prev = last_of.get(mid)
            last_of[mid] = (t, pid)
            if i == 0:
                continue
            if prev is None:  # a second message with the same payload
                causes["enqueued_twice"] += 1
                continue
            t_prev, pid_prev = prev
            if pid_prev in killed and t_prev <= killed[pid_prev] <= t:
                causes["worker_sigkill"] += 1
            elif pid_prev in died and t_prev <= died[pid_prev] <= t:
                causes["worker_died"] += 1
            elif any(t_prev - 0.5 <= down <= t for down, _up in crashes):
                causes["redis_crash"] += 1
            else:
                causes["visibility_expiry"] += 1
    return causes


EXPLAIN = {
    "worker_sigkill": "redelivered after its worker was SIGKILLed between recording the work and the ack",
    "worker_died": "redelivered after its worker exited by itself (not killed by the soak)",
    "redis_crash": "a Redis crash fell between the record and the ack: the record landed (appendfsync "
    "always) but its reply or the ack was lost, so the message came back",
    "visibility_expiry": "redelivered after its visibility timeout with no kill or crash in between "
    "(a stalled worker or an ack that came too late)",
    "enqueued_twice": "the payload was enqueued twice: an enqueue retried after a Redis crash (by the "
    "producer or redis-py's own retry) had landed before, but its reply was lost",
}


# -- the run ------------------------------------------------------------------------------


class Output:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)


def monitor_client(port: int) -> redis.Redis:
    """A client that fails fast (no retries), for the soak's own polling."""
    return redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))


class FailoverTarget:
    """The Redis of ``--failover``: a primary, two replicas and three sentinels (no
    persistence: the failover is what keeps the data). Everyone connects through the
    sentinel URL; a crash SIGKILLs the current primary and waits for the sentinels to
    promote a replica (one failover per soak: the killed server stays down)."""

    def __init__(self, cut: float = 0.0) -> None:
        self.cut = cut
        self.ha: Any = None
        self.killed: RedisServer | None = None
        self.port = 0

    def start(self, timeout: float = 10.0) -> None:
        if self.ha is None:
            from tests.support.ha_servers import SentinelSet  # the test suite's servers (ROOT is on sys.path)

            self.ha = SentinelSet(replicas=2)
        # A killed primary stays down: brought back without persistence it would be an empty
        # server until the sentinels make it a replica, a hazard of its own.

    @property
    def url(self) -> str:
        return str(self.ha.url)

    @property
    def dir(self) -> str:
        return "a primary, two replicas and three sentinels on loopback"

    def kill(self) -> None:
        old = self.ha.current_primary_port()
        if self.cut:  # a partition first: the primary takes writes its replicas never get
            self.ha.cut_replication()
            time.sleep(self.cut)
        self.killed = next(s for s in self.ha.servers() if s.port == old)
        self.killed.kill()
        self.ha.wait_for_failover(old)

    def monitor(self) -> redis.Redis:
        return from_url(self.url)

    def cleanup(self) -> None:
        if self.ha is not None:
            self.ha.stop()


def soak(args: argparse.Namespace, out: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    logdir = Path(tempfile.mkdtemp(prefix="keyqueue-chaos-"))
    server: Any = FailoverTarget(args.cut_replication) if args.failover else RedisServer(REDIS_EXTRA)
    fleet: Fleet | None = None
    stop = threading.Event()
    producers: list[Producer] = []
    ok = False
    try:
        server.start()
        if args.failover:
            out(f"Redis: {server.dir}, through {server.url}; min_replicas={args.min_replicas}")
            mon = server.monitor()
        else:
            out(f"redis-server on 127.0.0.1:{server.port} ({' '.join(REDIS_EXTRA)}), data in {server.dir}")
            mon = monitor_client(server.port)
        setup = Queue(QUEUE, url=server.url, visibility_timeout=VISIBILITY, bucket_seconds=1, scripting=args.scripting)
        ledger = Ledger()
        n_all = list(range(args.messages))
        for i in range(args.producers):
            q = Queue(QUEUE, url=server.url, scripting=args.scripting, min_replicas=args.min_replicas)
            producers.append(
                Producer(i, n_all[i :: args.producers], q, ledger, args.batch, args.rate / args.producers, run_id, stop)
            )
        fleet = Fleet(server.url, args.workers, args.scripting, logdir, args.work_ms)
        out(
            f"{args.workers} workers (-c {CONCURRENCY}), 1 reaper, {args.producers} producers, "
            f"{args.messages} messages, rate {args.rate or 'unlimited'} msg/s, visibility "
            f"{VISIBILITY:.0f}s, kill every ~{args.seconds_between_kills}s; logs in {logdir}"
        )

        t0 = time.monotonic()
        wall0 = time.time()
        deadline = t0 + args.deadline
        for p in producers:
            p.start()
        crashes: list[tuple[float, float]] = []
        tick = 0
        next_kill = t0 + args.seconds_between_kills
        next_line = t0
        produced_at: float | None = None
        finished = False
        last: dict[str, Any] = {}
        while True:
            now = time.monotonic()
            acked = ledger.count()
            # Redis: SIGKILL and restart at about 1/3 and 2/3 of production.
            # (--failover: one failover, at about half of production)
            planned = 1 if args.failover else 2
            if len(crashes) < planned and acked >= args.messages * (len(crashes) + 1) / (planned + 1):
                down = time.time()
                server.kill()
                what = "the primary (failed over)" if args.failover else "redis-server"
                out(f"t={now - t0:6.1f}s  SIGKILLed {what} at {acked}/{args.messages} acknowledged")
                time.sleep(args.redis_down)  # the outage itself, not a wait for something
                server.start(timeout=120)
                crashes.append((down, time.time()))
                out(
                    f"t={time.monotonic() - t0:6.1f}s  "
                    + (
                        "a replica was promoted; the killed primary stays down"
                        if args.failover
                        else f"redis-server restarted from its AOF ({time.time() - down:.1f}s down)"
                    )
                )
                continue
            if now >= next_kill:
                ev = fleet.kill_one(rng, tick)
                if ev is not None:
                    tick += 1
                    next_kill = now + args.seconds_between_kills * rng.uniform(0.7, 1.3)
                    if args.verbose:
                        out(f"t={now - t0:6.1f}s  SIGKILLed {ev.kind} pid {ev.pid}, restarted")
            fleet.respawn_dead()
            if produced_at is None and ledger.finished == len(producers):
                produced_at = now
            try:
                fleet.seen_working({text(spawn) for spawn in mon.smembers(WORKING)})
                done = int(mon.scard(DONE))
                s = setup.stats()
                last = {"done": done, **dataclasses.asdict(s)}
                drained = produced_at is not None and s.waiting + s.processing + s.delayed == 0
                if drained and done >= acked:
                    acked_set = set(ledger.acked)
                    done_set = {int(x) for x in mon.smembers(DONE)}
                    finished = acked_set <= done_set
                elif drained and args.cut_replication:
                    finished = True  # nothing left to deliver: what is missing was lost in the failover
            except TRANSIENT as exc:
                last = {"error": str(exc)}
            if now >= next_line or finished:
                next_line = now + args.progress
                out(
                    f"t={now - t0:6.1f}s  acknowledged {acked:>7}/{args.messages}  processed "
                    f"{last.get('done', '?'):>7}  waiting {last.get('waiting', '?'):>6}  in flight "
                    f"{last.get('processing', '?'):>4}  delayed {last.get('delayed', '?'):>4}  "
                    f"kills {len(fleet.kills):>3}  redis restarts {len(crashes)}"
                )
            if finished:
                break
            if now >= deadline:
                out(f"DEADLINE of {args.deadline:.0f}s reached")
                break
            time.sleep(0.1)

        stop.set()
        for p in producers:
            p.join(30)
        wall = time.monotonic() - t0
        codes = fleet.stop()
        out(f"workers and reaper stopped with SIGTERM, exit codes {codes}")

        # -- audit --
        acked_set = set(ledger.acked)
        done_set = {int(x) for x in mon.smembers(DONE)}
        per_n = {int(k): int(v) for k, v in mon.hgetall(DELIVERIES).items()}
        log = [text(entry) for entry in mon.lrange(LOG, 0, -1)]
        deliveries = sum(per_n.values())
        killed = {e.pid: e.at for e in fleet.kills if e.kind == "worker"}
        died = {e.pid: e.at for e in fleet.unexpected if e.kind == "worker"}
        causes = classify(log, killed, died, crashes)
        audit_q = Queue(QUEUE, url=server.url, scripting=args.scripting)
        final = dataclasses.asdict(audit_q.stats())
        keys = orphan_check(mon, audit_q)
        check: Any = None
        if hasattr(audit_q, "check"):
            try:
                report = audit_q.check()
                is_dc = dataclasses.is_dataclass(report) and not isinstance(report, type)
                check = dataclasses.asdict(report) if is_dc else report
                json.dumps(check)
            except TypeError:
                check = repr(check)
            except Exception as exc:  # the check is informative; its failure is reported
                check = f"check() raised {type(exc).__name__}: {exc}"
        lost = sorted(acked_set - done_set)
        worker_kills = sum(e.kind == "worker" for e in fleet.kills)
        result: dict[str, Any] = {
            "mode": ("scripted" if args.scripting else "script-free")
            + (f", failover, min_replicas={args.min_replicas}" if args.failover else ""),
            "messages": args.messages,
            "acknowledged": len(acked_set),
            "unacknowledged": args.messages - len(acked_set),
            "processed": len(acked_set & done_set),
            "processed_unacknowledged": len(done_set - acked_set),
            "lost": len(lost),
            "lost_sample": lost[:20],
            "deliveries": deliveries,
            "delivery_log_entries": len(log),
            "duplicates": deliveries - len(done_set),
            "duplicate_payloads": sum(1 for v in per_n.values() if v > 1),
            "redelivered": sum(1 for entry in log if int(entry.split()[3]) > 1),
            "duplicate_causes": causes,
            "producer_retried_batches": ledger.retried_batches,
            "producer_retried_payloads": len(ledger.retried_payloads),
            "producer_errors": ledger.errors,
            "enqueued_messages": len(ledger.ids),
            "orphaned": keys["orphaned"],
            "keys": keys,
            "final_stats": final,
            "check": check,
            "kills": len(fleet.kills),
            "worker_kills": worker_kills,
            "reaper_kills": len(fleet.kills) - worker_kills,
            "unexpected_exits": [dataclasses.asdict(e) for e in fleet.unexpected],
            "redis_restarts": len(crashes),
            "exit_codes": codes,
            "wall_seconds": round(wall, 2),
            "production_seconds": round((produced_at or time.monotonic()) - t0, 2),
            "throughput_msgs_per_s": round(deliveries / wall, 1) if wall > 0 else 0.0,
            "deadline_reached": not finished,
            "started_at": wall0,
            "logs": str(logdir),
        }
        result["ok"] = (
            result["lost"] == 0 and result["orphaned"] == 0 and result["unacknowledged"] == 0 and not ledger.errors
        )
        ok = result["ok"]
        return result
    finally:
        stop.set()
        if fleet is not None:
            fleet.kill_all()
        server.cleanup()
        if ok and not args.keep_logs:
            shutil.rmtree(logdir, ignore_errors=True)


def report(r: dict[str, Any], out: Callable[[str], None]) -> None:
    out("")
    out(
        f"chaos soak ({r['mode']}): {r['messages']} messages in {r['wall_seconds']:.1f}s "
        f"(production {r['production_seconds']:.1f}s), {r['throughput_msgs_per_s']:.0f} deliveries/s"
    )
    out(
        f"  kills: {r['kills']} ({r['worker_kills']} workers, {r['reaper_kills']} reaper), "
        f"redis-server SIGKILLed and restarted {r['redis_restarts']} times, "
        f"{len(r['unexpected_exits'])} unexpected process exits"
    )
    out(f"  acknowledged by enqueue   {r['acknowledged']:>8}   (unacknowledged {r['unacknowledged']})")
    out(f"  processed at least once   {r['processed']:>8}")
    out(f"  lost                      {r['lost']:>8}" + (f"   e.g. {r['lost_sample']}" if r["lost"] else ""))
    out(f"  deliveries                {r['deliveries']:>8}   (delivery log {r['delivery_log_entries']})")
    out(
        f"  duplicates                {r['duplicates']:>8}   on {r['duplicate_payloads']} payloads "
        f"({r['redelivered']} deliveries were redeliveries, receives > 1)"
    )
    for cause, count in r["duplicate_causes"].items():
        if count:
            out(f"    {count:>6}  {cause}: {EXPLAIN[cause]}")
    out(
        f"  producer retries: {r['producer_retried_batches']} batch attempts failed, "
        f"{r['producer_retried_payloads']} payloads retried"
    )
    k = r["keys"]
    out(
        f"  keys of the queue: {k['keys']}, item hashes {k['item_hashes']}, timer buckets "
        f"{k['timer_buckets']}, orphaned {k['orphaned']}, dangling references {k['dangling_refs']}"
    )
    out(f"  final stats: {r['final_stats']}")
    if r["check"] is not None:
        out(f"  Queue.check(): {r['check']}")
    for e in r["producer_errors"]:
        out(f"  PRODUCER ERROR: {e}")
    if r["deadline_reached"]:
        out("  the deadline was reached before every acknowledged payload was processed")
    out("OK: nothing lost, nothing orphaned" if r["ok"] else f"FAILED (logs kept in {r['logs']})")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, required=True, help="payloads to enqueue in total")
    ap.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    ap.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    ap.add_argument("--seconds-between-kills", type=float, default=1.0)
    ap.add_argument(
        "--rate",
        type=float,
        default=500.0,
        help="enqueue rate over all producers, msg/s; 0: as fast as they can (default 500)",
    )
    ap.add_argument("--batch", type=int, default=20, help="payloads per enqueue call (default 20)")
    ap.add_argument("--work-ms", type=float, default=5.0, help="simulated work per message (default 5)")
    ap.add_argument("--redis-down", type=float, default=1.0, help="seconds Redis stays down per crash")
    ap.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds before giving up (default 120 + 3 x expected production time)",
    )
    ap.add_argument("--progress", type=float, default=2.0, help="seconds between progress lines")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-scripting", dest="scripting", action="store_false")
    ap.add_argument(
        "--failover",
        action="store_true",
        help="Redis is a primary, two replicas and three sentinels; a crash is a SIGKILL "
        "of the current primary, and everyone follows the sentinels",
    )
    ap.add_argument("--min-replicas", type=int, default=0, help="producers' min_replicas (default 0)")
    ap.add_argument(
        "--cut-replication",
        type=float,
        default=0.0,
        metavar="S",
        help="--failover: cut the primary's replication link S seconds before it is "
        "killed (a partition: with --min-replicas 0 the writes of those seconds "
        "are acknowledged and lost, so the soak reports them and exits 1)",
    )
    ap.add_argument("--json", action="store_true", help="report JSON on stdout (progress on stderr)")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per process kill")
    args = ap.parse_args(argv)
    for name in ("messages", "workers", "producers", "batch"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if args.seconds_between_kills <= 0 or args.rate < 0 or args.redis_down < 0:
        ap.error("--seconds-between-kills must be > 0, --rate and --redis-down >= 0")
    if args.deadline is None:
        args.deadline = 120.0 + 3.0 * args.messages / (args.rate or 2000.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Output(sys.stderr if args.json else sys.stdout)

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally blocks: everything is cleaned up

    signal.signal(signal.SIGTERM, terminate)
    try:
        result = soak(args, out)
    except KeyQueueError as exc:
        out(f"Error: {exc}")
        return 2 if isinstance(exc, ValueError) else 1
    report(result, out)
    if args.json:
        print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
