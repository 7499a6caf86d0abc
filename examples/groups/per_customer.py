"""Per-customer order: each customer's events are handled one at a time, in the order they
were sent, while different customers' events (and ungrouped messages) go side by side."""

import os
import threading

import keyqueue
from keyqueue import Queue

q = Queue(
    "account-events",
    url=os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0"),
    group_concurrency=1,  # the default: one message of a group released at a time
)
q.enqueue_many(["open", "deposit 100", "withdraw 30"], group="customer-1")
q.enqueue_many(["open", "deposit 5"], group="customer-2")
q.enqueue("newsletter")  # ungrouped: never waits for a group
print(len(q), "waiting,", q.stats().held, "of them held behind their group")
for g in q.groups():
    print(g.id, "active", g.active, "held", g.held)

batch = q.claim_many(10)  # one of each group (its first), and the ungrouped one
print(sorted(f"{m.group}: {m.text}" for m in batch))
q.ack_many(batch)  # each ack releases its group's next

handled: list[tuple[str | None, str]] = []
lock = threading.Lock()


def handle(message: keyqueue.Message) -> None:
    with lock:
        handled.append((message.group, message.text))


q.worker(handle, concurrency=4).run(burst=True)  # four threads, still one at a time per group
for customer in ("customer-1", "customer-2"):
    print(customer, [text for group, text in handled if group == customer])
print(q.groups(), len(q))
