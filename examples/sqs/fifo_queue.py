"""An SQS FIFO queue on `keyqueue serve --sqs`: each customer's orders in the order they were
sent, a repeat within 5 minutes dropped, and the same queue as a grouped keyqueue queue.
Runs as it is, with the variables of examples/sqs/boto3_client.py."""

import os

import boto3

from keyqueue import Queue

sqs = boto3.client("sqs", endpoint_url=os.environ.get("SQS_ENDPOINT", "http://127.0.0.1:9324"),
                   region_name="us-east-1", aws_access_key_id=os.environ["KEYQUEUE_SQS_ACCESS_KEY_ID"],
                   aws_secret_access_key=os.environ["KEYQUEUE_SQS_SECRET_ACCESS_KEY"])
url = sqs.create_queue(QueueName="orders.fifo",  # a FIFO queue: the .fifo name and FifoQueue
                       Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
for customer, order in [("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("alice", "a2")]:
    sent = sqs.send_message(QueueUrl=url, MessageBody=order, MessageGroupId=customer)
    print(order, sent["SequenceNumber"])  # the second a2 is a duplicate: a2's number again

# One receive: at most one message of each group; the next of a group after a delete.
while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                 MessageSystemAttributeNames=["MessageGroupId"]).get("Messages"):
    print([(m["Attributes"]["MessageGroupId"], m["Body"]) for m in got])
    for m in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

# The library sees a queue of message groups (group_concurrency 1).
sqs.send_message(QueueUrl=url, MessageBody="a3", MessageGroupId="alice")
msg = Queue("orders.fifo").claim()
print(msg.group, msg.text)
msg.ack()
sqs.delete_queue(QueueUrl=url)  # (its deduplication ids too: the example runs again as it is)
