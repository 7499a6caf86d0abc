"""Producer: enqueue messages, one at a time, in a batch, delayed and deduplicated.
Runs as it is: `python examples/quickstart/sync_producer.py` (Redis at KEYQUEUE_URL)."""

from keyqueue import Queue

# Redis from url= or client=, else KEYQUEUE_URL, else redis://localhost:6379/0
q = Queue("emails", visibility_timeout=30, max_receives=5)

print(q.enqueue('{"to": "ada@example.com"}'))                      # the new message's id: 1
print(q.enqueue_many(['{"to": "bob@example.com"}', '{"to": "cy@example.com"}']))  # one round trip
q.enqueue('{"to": "later@example.com"}', delay=3600)               # visible in an hour
first = q.enqueue('{"to": "dee@example.com"}', dedup_key="welcome-dee")
again = q.enqueue('{"to": "dee@example.com"}', dedup_key="welcome-dee")  # within 5 min: ignored
print(first == again)                                               # True: the first one's id
print(q.stats())
