"""Code written for Amazon SQS, unchanged but for its endpoint, against `keyqueue serve --sqs`;
then the same queue from the Python library. Runs as it is:
`python examples/sqs/boto3_client.py`, with the variables `serve --sqs` was started with
(KEYQUEUE_SQS_ACCESS_KEY_ID, KEYQUEUE_SQS_SECRET_ACCESS_KEY), KEYQUEUE_URL, and
SQS_ENDPOINT if it is not http://127.0.0.1:9324."""

import os

import boto3

from keyqueue import Queue

sqs = boto3.client("sqs", endpoint_url=os.environ.get("SQS_ENDPOINT", "http://127.0.0.1:9324"),
                   region_name="us-east-1", aws_access_key_id=os.environ["KEYQUEUE_SQS_ACCESS_KEY_ID"],
                   aws_secret_access_key=os.environ["KEYQUEUE_SQS_SECRET_ACCESS_KEY"])
url = sqs.create_queue(QueueName="emails", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
print(url)  # http://HOST:PORT/000000000000/emails
sqs.send_message(QueueUrl=url, MessageBody='{"to": "a@example.com"}',
                 MessageAttributes={"kind": {"DataType": "String", "StringValue": "welcome"}})
for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20,
                             MessageAttributeNames=["All"]).get("Messages", []):
    print(m["Body"], m["MessageAttributes"]["kind"]["StringValue"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

# The same queue, from the library: what SQS clients send, keyqueue consumers receive.
sqs.send_message(QueueUrl=url, MessageBody="from boto3")
msg = Queue("emails").claim()
print(msg.text, msg.receives)
msg.ack()
