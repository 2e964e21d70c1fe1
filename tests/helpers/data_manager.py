"""A real gRPC server standing in for Google's Data Manager API
(google.ads.datamanager.v1.IngestionService: IngestEvents and
RetrieveRequestStatus) for the conversion tests, with the official
google-ads-datamanager library's own request and response types and gRPC's
generic handler (the library ships no servicer base classes). It listens on
loopback with gRPC local credentials, which is how our client reaches it
(DATA_MANAGER_ENDPOINT); OAuth refreshes go to the Google Ads tests' token
server (GOOGLE_OAUTH_TOKEN_URL). Nothing of ours is replaced.

Like Google, it fails a call fast and judges what it took later. Each call
is answered per `plan` (in order), then per `default`: "ok" answers it;
"UNAVAILABLE" is that gRPC status; "auth" is UNAUTHENTICATED; an error
reason of the API ("INVALID_CONVERSION_ACTION_ID", "INVALID_CURRENCY_CODE"…)
is INVALID_ARGUMENT with Google's standard details (ErrorInfo, BadRequest
with the field, RequestInfo). A call without a bearer token is refused as
Google refuses it. An event taken is judged per `verdicts` (in order), then
"ok": "ok" succeeds; "PROCESSING" reads as processing once, then succeeds;
a processing error ("CLICK_NOT_FOUND", "TOO_RECENT_CLICK", "EVENT_TOO_OLD"…)
fails it. Google keeps one conversion per transaction id and conversion
action: a second is judged DUPLICATE_TRANSACTION_ID and not counted.

Every call is kept in `seen` (method, request, metadata); what counted in
`taken`; what was only validated in `validated`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
from google.ads.datamanager_v1 import (
    ErrorCount,
    ErrorInfo,
    IngestEventsRequest,
    IngestEventsResponse,
    ProcessingErrorReason,
    RequestStatusPerDestination,
    RetrieveRequestStatusRequest,
    RetrieveRequestStatusResponse,
)
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from agents.conversions.data_manager import data_manager_clients_reset
from tests.helpers.google_ads import TokenServer

SERVICE = "google.ads.datamanager.v1.IngestionService"
DOMAIN = "datamanager.googleapis.com"
# Google's field and wording for the refusals the tests ask for.
FIELDS = {
    "INVALID_CONVERSION_ACTION_ID": ("destinations[0].product_destination_id", "Conversion action ID is not valid."),
    "INVALID_CURRENCY_CODE": ("events[0].currency", "The currency code is not supported."),
    "INVALID_SHA256_FORMAT": ("events[0].user_data.user_identifiers", "The SHA256 encoded value is malformed."),
    "INVALID_REQUEST_ID": ("request_id", "The request ID used to retrieve the status of a request is not valid."),
    "REQUIRED_FIELD_MISSING": ("events[0].transaction_id", "Required field is missing."),
}
Status = RequestStatusPerDestination.RequestStatus
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class DataManagerServer:
    def __init__(self) -> None:
        self.plan: list[str] = []
        self.default = "ok"
        self.verdicts: list[str] = []
        self.seen: list[dict[str, Any]] = []
        self.taken: list[dict[str, Any]] = []
        self.validated: list[dict[str, Any]] = []
        self.requests: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        "IngestEvents": grpc.unary_unary_rpc_method_handler(
                            self._ingest,
                            request_deserializer=IngestEventsRequest.deserialize,
                            response_serializer=IngestEventsResponse.serialize,
                        ),
                        "RetrieveRequestStatus": grpc.unary_unary_rpc_method_handler(
                            self._status,
                            request_deserializer=RetrieveRequestStatusRequest.deserialize,
                            response_serializer=RetrieveRequestStatusResponse.serialize,
                        ),
                    },
                ),
            )
        )
        local = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        self.port = self.server.add_secure_port("127.0.0.1:0", local)
        self.endpoint = f"127.0.0.1:{self.port}"

    # --- answers ----------------------------------------------------------------------------

    def _note(self, method: str, request: Any, context: grpc.ServicerContext) -> str:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.seen.append(
            {
                "method": method,
                "request": type(request).to_dict(
                    request, use_integers_for_enums=False, always_print_fields_with_no_presence=False
                ),
                "metadata": metadata,
            }
        )
        if not metadata.get("authorization", "").startswith("Bearer "):
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, "ACCESS_TOKEN_MISSING")
        answer = self.plan.pop(0) if self.plan else self.default
        if answer == "UNAVAILABLE":
            context.abort(grpc.StatusCode.UNAVAILABLE, "The service is currently unavailable.")
        if answer == "auth":
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, "ACCESS_TOKEN_EXPIRED")
        if answer != "ok":
            self._refuse(context, answer)
        return f"req-local-{len(self.seen)}"

    def _abort(self, context: grpc.ServicerContext, code: grpc.StatusCode, reason: str) -> None:
        message = "Request had invalid authentication credentials. Expected OAuth 2 access token."
        status = status_pb2.Status(
            code=code.value[0], message=message, details=[_packed(error_details_pb2.ErrorInfo(reason=reason))]
        )
        context.abort_with_status(rpc_status.to_status(status))

    def _refuse(self, context: grpc.ServicerContext, reason: str) -> None:
        field, description = FIELDS.get(reason, ("events[0]", reason.replace("_", " ").capitalize() + "."))
        status = status_pb2.Status(
            code=code_pb2.INVALID_ARGUMENT,
            message="There was a problem with the request.",
            details=[
                _packed(error_details_pb2.ErrorInfo(reason="INVALID_ARGUMENT", domain=DOMAIN)),
                _packed(
                    error_details_pb2.BadRequest(
                        field_violations=[
                            error_details_pb2.BadRequest.FieldViolation(
                                field=field, description=description, reason=reason
                            )
                        ]
                    )
                ),
                _packed(error_details_pb2.RequestInfo(request_id=f"req-refused-{len(self.seen)}")),
            ],
        )
        context.abort_with_status(rpc_status.to_status(status))

    def _check(self, request: Any, context: grpc.ServicerContext) -> None:
        """The fast-fail checks Google makes of every event."""
        for event in request.events:
            if not event.transaction_id:
                self._refuse(context, "REQUIRED_FIELD_MISSING")
            hashed = [i.email_address or i.phone_number for i in event.user_data.user_identifiers]
            if hashed and (
                request.encoding != request.encoding.HEX or not all(SHA256_HEX.fullmatch(h) for h in hashed)
            ):
                self._refuse(context, "INVALID_SHA256_FORMAT")
            if event.currency and len(event.currency) != 3:
                self._refuse(context, "INVALID_CURRENCY_CODE")

    def _ingest(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            request_id = self._note("IngestEvents", request, context)
            self._check(request, context)
            destination = request.destinations[0]
            if request.validate_only:
                self.validated.append(self.seen[-1]["request"])
                return IngestEventsResponse()
            reasons, processing = [], False
            for event in request.events:
                verdict = self.verdicts.pop(0) if self.verdicts else "ok"
                key = (destination.product_destination_id, event.transaction_id)
                if any(
                    (t["destination"]["product_destination_id"], t["event"]["transaction_id"]) == key
                    for t in self.taken
                ):
                    verdict = "DUPLICATE_TRANSACTION_ID"
                processing = processing or verdict == "PROCESSING"
                if verdict in ("ok", "PROCESSING"):
                    self.taken.append(
                        {
                            "destination": type(destination).to_dict(
                                destination, use_integers_for_enums=False, always_print_fields_with_no_presence=False
                            ),
                            "event": type(event).to_dict(
                                event, use_integers_for_enums=False, always_print_fields_with_no_presence=False
                            ),
                        }
                    )
                else:
                    reasons.append(getattr(ProcessingErrorReason, f"PROCESSING_ERROR_REASON_{verdict}"))
            self.requests[request_id] = {
                "destination": destination,
                "processing": processing,
                "reasons": reasons,
                "count": len(request.events),
            }
            return IngestEventsResponse(request_id=request_id)

    def _status(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            self._note("RetrieveRequestStatus", request, context)
            found = self.requests.get(request.request_id)
            if found is None:
                self._refuse(context, "INVALID_REQUEST_ID")
            assert found is not None
            state, errors = Status.SUCCESS, None
            if found["processing"]:
                found["processing"] = False
                state = Status.PROCESSING
            elif found["reasons"]:
                state = Status.FAILED
                errors = ErrorInfo(
                    error_counts=[ErrorCount(record_count=1, reason=reason) for reason in found["reasons"]]
                )
            status = RequestStatusPerDestination(
                destination=found["destination"],
                request_status=state,
                error_info=errors,
                events_ingestion_status=RequestStatusPerDestination.IngestEventsStatus(record_count=found["count"]),
            )
            return RetrieveRequestStatusResponse(request_status_per_destination=[status])

    def ingests(self) -> list[dict[str, Any]]:
        return [s for s in self.seen if s["method"] == "IngestEvents"]


@contextmanager
def data_manager_running(settings: Any) -> Iterator[DataManagerServer]:
    """A started Data Manager stand-in and token endpoint, with our settings
    pointing at them."""
    server, tokens = DataManagerServer(), TokenServer()
    server.server.start()
    tokens.thread.start()
    settings.DATA_MANAGER_ENDPOINT = server.endpoint
    settings.GOOGLE_OAUTH_TOKEN_URL = tokens.url
    settings.GOOGLE_ADS_TIMEOUT = 5.0
    data_manager_clients_reset()
    try:
        yield server
    finally:
        data_manager_clients_reset()
        server.server.stop(grace=None)
        tokens.httpd.shutdown()
        tokens.httpd.server_close()
