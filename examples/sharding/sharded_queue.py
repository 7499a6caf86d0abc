"""One logical queue stored as 6 shards: on a Redis Cluster its load spreads over the nodes
(on one server it works the same). Producers and workers need no other change."""

import os

from keyqueue import Queue

url = os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0")
orders = Queue("orders", url=url, shards=6)  # the count is fixed when the queue is first made

ids = [orders.enqueue(f"order {i}") for i in range(12)]  # round robin over the shards
print(ids[0].count("#"), len({i.split("#")[0] for i in ids}))  # "<shard>#<id in the shard>": 6 shards
same = [orders.enqueue(f"refund {i}", shard_key="customer-42") for i in range(3)]
print(len({i.split("#")[0] for i in same}), "shard for one key")  # so in order there

print(Queue("orders", url=url).shards, "shards adopted")  # a Queue made without shards=
print(orders.stats())  # the logical queue: sums over the shards
print([s.waiting for s in orders.shard_stats()])  # and each shard

message = orders.claim()  # every shard, from a rotating one
assert message is not None
print(message.ack())  # ack, release, extend, dead_letter route to the shard

handled = []
orders.worker(lambda m: handled.append(m.id), concurrency=2).run(burst=True)
print(len(handled), "handled;", len(orders), "waiting")
