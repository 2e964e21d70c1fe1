"""A real gRPC server standing in for the Google Ads API's conversion
services, and a real OAuth token endpoint, for the conversion tests.

The server implements ConversionUploadService.UploadClickConversions and
ConversionAdjustmentUploadService.UploadConversionAdjustments with the
google-ads library's own generated method names and request and response
types (the library ships no servicer base classes: gRPC's generic handler
serves the same methods). It listens on loopback with gRPC local
credentials, which is how our client reaches it (GOOGLE_ADS_ENDPOINT);
OAuth refreshes go to the token server (GOOGLE_OAUTH_TOKEN_URL). Nothing of
ours is replaced.

Each conversion (or adjustment) is answered per `plan` (in order), then per
`default`: "ok" takes it; an error name ("CLICK_NOT_FOUND",
"TOO_RECENT_EVENT", "INVALID_CONVERSION_ACTION_TYPE"…) refuses it in the
partial failure error with Google's message; "auth" refuses the whole
request (AUTHENTICATION_ERROR in the trailing metadata, as Google does).
Every request is kept in `seen` with its metadata; what was taken in
`taken` (clicks) and `adjusted`.

The same server answers GoogleAdsService.Search over Local Services leads and
their conversations, and LocalServicesLeadService.ProvideLeadFeedback, from
the rows planted on `lsa` (devtools/simulator/lsa.py: the simulator serves
the same stand-in).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.ads.googleads.v26.errors.types import errors as ads_errors
from google.ads.googleads.v26.errors.types.conversion_adjustment_upload_error import (
    ConversionAdjustmentUploadErrorEnum,
)
from google.ads.googleads.v26.errors.types.conversion_upload_error import ConversionUploadErrorEnum
from google.ads.googleads.v26.services.types import conversion_adjustment_upload_service as adjust
from google.ads.googleads.v26.services.types import conversion_upload_service as upload
from google.protobuf import any_pb2
from google.rpc import status_pb2

from agents.conversions.google import google_services_reset
from devtools.simulator.lsa import LocalServicesStandIn

VERSION = "v26"
FAILURE_KEY = f"google.ads.googleads.{VERSION}.errors.googleadsfailure-bin"
MESSAGES = {
    "CLICK_NOT_FOUND": "The click associated with the given identifier or iOS URL parameter was not found in the "
    "specified conversion action.",
    "TOO_RECENT_EVENT": "The click associated with the given identifier or iOS URL parameter occurred too recently. "
    "Please wait at least 6 hours after the click before uploading.",
    "INVALID_CONVERSION_ACTION_TYPE": "The conversion action's type does not allow this upload.",
    "CONVERSION_NOT_FOUND": "The conversion for this conversion action and conversion identifier can't be found.",
    "CLICK_CONVERSION_ALREADY_EXISTS": "A click conversion with the same identifiers has already been uploaded.",
}
ADJUSTMENT_ERRORS = {"CONVERSION_NOT_FOUND", "TOO_RECENT_CONVERSION", "RESTATEMENT_ALREADY_EXISTS"}


def _failure(errors: list[tuple[int, str, str]]) -> ads_errors.GoogleAdsFailure:
    """A GoogleAdsFailure: (index in the request, field, error name) each."""
    found = []
    for index, field, name in errors:
        if name in ADJUSTMENT_ERRORS:
            adjustment_error = getattr(ConversionAdjustmentUploadErrorEnum.ConversionAdjustmentUploadError, name)
            code = ads_errors.ErrorCode(conversion_adjustment_upload_error=adjustment_error)
        else:
            upload_error = getattr(ConversionUploadErrorEnum.ConversionUploadError, name)
            code = ads_errors.ErrorCode(conversion_upload_error=upload_error)
        location = ads_errors.ErrorLocation(
            field_path_elements=[ads_errors.ErrorLocation.FieldPathElement(field_name=field, index=index)]
        )
        found.append(ads_errors.GoogleAdsError(error_code=code, message=MESSAGES.get(name, name), location=location))
    return ads_errors.GoogleAdsFailure(errors=found)


def _partial(errors: list[tuple[int, str, str]]) -> status_pb2.Status | None:
    if not errors:
        return None
    packed = any_pb2.Any(
        type_url=f"type.googleapis.com/google.ads.googleads.{VERSION}.errors.GoogleAdsFailure",
        value=ads_errors.GoogleAdsFailure.serialize(_failure(errors)),
    )
    return status_pb2.Status(code=3, message="Multiple errors in ‘details’. First error: …", details=[packed])


class GoogleAdsServer:
    def __init__(self) -> None:
        self.plan: list[str] = []
        self.default = "ok"
        self.seen: list[dict[str, Any]] = []
        self.taken: list[dict[str, Any]] = []
        self.adjusted: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    f"google.ads.googleads.{VERSION}.services.ConversionUploadService",
                    {
                        "UploadClickConversions": grpc.unary_unary_rpc_method_handler(
                            self._clicks,
                            request_deserializer=upload.UploadClickConversionsRequest.deserialize,
                            response_serializer=upload.UploadClickConversionsResponse.serialize,
                        )
                    },
                ),
                grpc.method_handlers_generic_handler(
                    f"google.ads.googleads.{VERSION}.services.ConversionAdjustmentUploadService",
                    {
                        "UploadConversionAdjustments": grpc.unary_unary_rpc_method_handler(
                            self._adjustments,
                            request_deserializer=adjust.UploadConversionAdjustmentsRequest.deserialize,
                            response_serializer=adjust.UploadConversionAdjustmentsResponse.serialize,
                        )
                    },
                ),
            )
        )
        self.lsa = LocalServicesStandIn()
        self.server.add_generic_rpc_handlers(self.lsa.handlers())
        local = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        self.port = self.server.add_secure_port("127.0.0.1:0", local)
        self.endpoint = f"127.0.0.1:{self.port}"

    def _next(self) -> str:
        return self.plan.pop(0) if self.plan else self.default

    def _note(self, method: str, request: Any, context: grpc.ServicerContext) -> dict[str, Any]:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        seen = {
            "method": method,
            "request": type(request).to_dict(request, use_integers_for_enums=False),
            "metadata": metadata,
        }
        self.seen.append(seen)
        return seen

    def _refuse_request(self, context: grpc.ServicerContext) -> None:
        failure = ads_errors.GoogleAdsFailure(
            errors=[
                ads_errors.GoogleAdsError(
                    error_code=ads_errors.ErrorCode(authentication_error="OAUTH_TOKEN_INVALID"),
                    message="Oauth token in the header is not valid.",
                )
            ]
        )
        context.set_trailing_metadata(
            ((FAILURE_KEY, ads_errors.GoogleAdsFailure.serialize(failure)), ("request-id", "req-local-1"))
        )
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "Request is missing required authentication credential.")

    def _clicks(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            self._note("UploadClickConversions", request, context)
            answers = [self._next() for _ in request.conversions]
            if "auth" in answers:
                self._refuse_request(context)
            results, errors = [], []
            for index, (conversion, answer) in enumerate(zip(request.conversions, answers, strict=True)):
                if answer == "ok":
                    self.taken.append(type(conversion).to_dict(conversion, use_integers_for_enums=False))
                    results.append(
                        upload.ClickConversionResult(
                            gclid=conversion.gclid,
                            conversion_action=conversion.conversion_action,
                            conversion_date_time=conversion.conversion_date_time,
                        )
                    )
                else:
                    errors.append((index, "conversions", answer))
                    results.append(upload.ClickConversionResult())
            return upload.UploadClickConversionsResponse(partial_failure_error=_partial(errors), results=results)

    def _adjustments(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            self._note("UploadConversionAdjustments", request, context)
            results, errors = [], []
            for index, adjustment in enumerate(request.conversion_adjustments):
                answer = self._next()
                if answer == "ok":
                    self.adjusted.append(type(adjustment).to_dict(adjustment, use_integers_for_enums=False))
                    results.append(
                        adjust.ConversionAdjustmentResult(
                            conversion_action=adjustment.conversion_action,
                            adjustment_type=adjustment.adjustment_type,
                        )
                    )
                else:
                    errors.append((index, "conversion_adjustments", answer))
                    results.append(adjust.ConversionAdjustmentResult())
            return adjust.UploadConversionAdjustmentsResponse(partial_failure_error=_partial(errors), results=results)

    def authorizations(self) -> set[str]:
        return {s["metadata"].get("authorization", "") for s in self.seen}


class TokenServer:
    """Google's OAuth token endpoint, for the refresh-token grant."""

    def __init__(self) -> None:
        self.grants: list[str] = []
        tokens = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                tokens.grants.append(body)
                data = json.dumps({"access_token": "ya29.local-test-token", "expires_in": 3599, "token_type": "Bearer"})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)


@contextmanager
def google_ads_running(settings: Any) -> Iterator[GoogleAdsServer]:
    """A started Google Ads stand-in and token endpoint, with our settings
    pointing at them."""
    server, tokens = GoogleAdsServer(), TokenServer()
    server.server.start()
    tokens.thread.start()
    settings.GOOGLE_ADS_ENDPOINT = server.endpoint
    settings.GOOGLE_OAUTH_TOKEN_URL = tokens.url
    settings.GOOGLE_ADS_TIMEOUT = 5.0
    google_services_reset()
    try:
        yield server
    finally:
        google_services_reset()
        server.server.stop(grace=None)
        tokens.httpd.shutdown()
        tokens.httpd.server_close()
