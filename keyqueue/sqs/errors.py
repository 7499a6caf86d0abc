"""SQS's error codes: the JSON protocol's ``__type`` (the modelled shape name), the query
protocol's code (sent in ``x-amzn-query-error``, which boto3 reports as the code) and the
HTTP status SQS answers with."""

from __future__ import annotations

#: shape name -> (query-protocol code, HTTP status)
CODES: dict[str, tuple[str, int]] = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 404),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    # common errors of every AWS query-compatible service (not modelled shapes)
    "InvalidParameterValue": ("InvalidParameterValue", 400),
    "MissingParameter": ("MissingParameter", 400),
    "InvalidAction": ("InvalidAction", 400),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "InternalFailure": ("InternalFailure", 500),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
}

#: The JSON protocol's ``__type`` where it is not the shape's name: two common errors, which
#: SQS's JSON replies name so (boto3 shows it as ``Error.QueryErrorCode``).
JSON_TYPES = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
}

#: Errors caused by the server side (``Receiver``); every other is the caller's (``Sender``).
RECEIVER = frozenset({"InternalFailure", "ServiceUnavailable"})


class SqsError(Exception):
    """An SQS error reply: ``shape`` names the error (a key of CODES)."""

    def __init__(self, shape: str, message: str) -> None:
        super().__init__(message)
        assert shape in CODES, shape
        self.shape = shape
        self.message = message

    @property
    def json_type(self) -> str:
        """The JSON protocol's ``__type`` (without its namespace)."""
        return JSON_TYPES.get(self.shape, self.shape)

    @property
    def code(self) -> str:
        """The code a query-compatible client (boto3) reports."""
        return CODES[self.shape][0]

    @property
    def status(self) -> int:
        return CODES[self.shape][1]

    @property
    def fault(self) -> str:
        return "Receiver" if self.shape in RECEIVER else "Sender"


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def no_queue() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")
