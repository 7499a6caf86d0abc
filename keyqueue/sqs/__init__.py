"""The Amazon SQS wire API (AWS JSON 1.0) over keyqueue queues: ``keyqueue serve --sqs``
mounts ``create_sqs_app`` so boto3, the aws CLI and other AWS SDKs work unchanged against
queues that the Python library, the workers and the CLI see too."""

from .app import SqsApp, create_sqs_app

__all__ = ["SqsApp", "create_sqs_app"]
