"""AWS Signature Version 4, verified: the canonical request is rebuilt with botocore's own
signer from the method, path, query, signed headers and body as received, and the
signature compared in constant time. The request's X-Amz-Date must be within 5 minutes of
the server's clock, as AWS requires."""

from __future__ import annotations

import hmac
import re
import time
from calendar import timegm
from typing import Mapping

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from .errors import SqsError

#: How far a request's X-Amz-Date may be from the server's clock.
SKEW_SECONDS = 300

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})\s*$"
)
_DATE = re.compile(r"\d{8}T\d{6}Z")


class Verifier:
    """Checks requests against one access key id and its secret."""

    def __init__(self, access_key_id: str, secret_access_key: str, service: str = "sqs") -> None:
        self._credentials = Credentials(access_key_id, secret_access_key)
        self._key_id = access_key_id.encode()
        self._service = service

    def verify(self, method: str, url: str, headers: Mapping[str, str], body: bytes, now: float | None = None) -> None:
        """Return if the request is signed with our credentials; raise SqsError otherwise.
        ``headers``: lower-case names, as received."""
        authorization = headers.get("authorization")
        if not authorization:
            raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token")
        m = _AUTH.match(authorization)
        if not m:
            raise SqsError(
                "IncompleteSignature",
                "Authorization header requires 'Credential', 'SignedHeaders' "
                "and 'Signature' parameters of an AWS4-HMAC-SHA256 signature.",
            )
        credential, signed, signature = m.groups()
        scope = credential.split("/")
        if len(scope) != 5 or scope[3] != self._service or scope[4] != "aws4_request":
            raise SqsError(
                "IncompleteSignature",
                f"Credential scope {'/'.join(scope[1:])!r} is not valid for the service {self._service!r}.",
            )
        key_id, day, region = scope[0], scope[1], scope[2]
        if not hmac.compare_digest(key_id.encode(), self._key_id):
            raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.")
        stamp = headers.get("x-amz-date", "")
        if not _DATE.fullmatch(stamp) or stamp[:8] != day:
            raise SqsError(
                "IncompleteSignature",
                "The request must carry an X-Amz-Date header (YYYYMMDDTHHMMSSZ) of the credential scope's day.",
            )
        self.check_time(stamp, time.time() if now is None else now)
        names = signed.split(";")
        if "host" not in names or any(n not in headers for n in names):
            raise SqsError("SignatureDoesNotMatch", "The signed headers must include host and be present.")
        request = AWSRequest(method=method, url=url, data=body, headers={n: headers[n] for n in names})
        request.context["timestamp"] = stamp
        signer = SigV4Auth(self._credentials, self._service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        rebuilt = signer.signed_headers(signer.headers_to_sign(request))
        if rebuilt != signed or not hmac.compare_digest(expected.encode(), signature.encode()):
            raise SqsError(
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the "
                "signature you provided. Check your AWS Secret Access Key and signing method.",
            )

    @staticmethod
    def check_time(stamp: str, now: float) -> None:
        # (by hand: time.strptime costs a tenth of a millisecond, on every request)
        when = timegm(
            (
                int(stamp[0:4]),
                int(stamp[4:6]),
                int(stamp[6:8]),
                int(stamp[9:11]),
                int(stamp[11:13]),
                int(stamp[13:15]),
                0,
                0,
                0,
            )
        )
        fmt = "%Y%m%dT%H%M%SZ"
        if when < now - SKEW_SECONDS:
            limit = time.strftime(fmt, time.gmtime(now - SKEW_SECONDS))
            raise SqsError(
                "SignatureDoesNotMatch",
                f"Signature expired: {stamp} is now earlier than {limit} "
                f"({time.strftime(fmt, time.gmtime(now))} - 5 min.)",
            )
        if when > now + SKEW_SECONDS:
            limit = time.strftime(fmt, time.gmtime(now + SKEW_SECONDS))
            raise SqsError(
                "SignatureDoesNotMatch",
                f"Signature not yet current: {stamp} is still later than "
                f"{limit} ({time.strftime(fmt, time.gmtime(now))} + 5 min.)",
            )
