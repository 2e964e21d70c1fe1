"""A real OpenID Connect provider standing in for Google, Entra, Okta or
Keycloak, on 127.0.0.1, for the single sign-on tests. OIDC_ISSUER points at
its `url`; everything else our client learns from its discovery document.

- `GET /.well-known/openid-configuration`: the discovery document.
- `GET /jwks`: the public half of its RSA signing key (RS256, `kid`).
- `GET /authorize`: the person in `person` consents at once: a redirect
  back to `redirect_uri` with a code and the state. PKCE is required, as a
  provider set up for it does: no S256 `code_challenge`, no code.
- `POST /token`: the code (once, for our client, the same redirect URI) and
  the `code_verifier` whose S256 is the challenge it was issued for; then an
  access token and an ID token (the person's claims, the nonce, iss, aud,
  iat, exp) signed with its key. Every refusal is kept in `refusals`.
- `GET /userinfo`: with the access token, the person's claims (`userinfo`
  says which).

What a test can make it do wrong: sign with another key under the same
`kid` (`sign_with`), issue tokens already expired (`lifetime` below 0), for
another client (`audience`), or name another issuer (`issuer`: in its
discovery document and its tokens).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from devtools.simulator.local_server import LocalServer

CLIENT_ID = "leadops-test-client"
CLIENT_SECRET = "stand-in-client-secret-0123456789"
KID = "stand-in-key-1"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


class OidcProvider(LocalServer):
    def __init__(self, port: int = 0) -> None:
        self.lock = threading.Lock()
        self.key = rsa_key()
        # Who consents at /authorize next: their claims (sub, email, the role claim…).
        self.person: dict[str, Any] = {}
        # Claims /userinfo answers with (None: all of the person's).
        self.userinfo: list[str] | None = None
        self.sign_with: rsa.RSAPrivateKey | None = None
        self.lifetime = 300
        self.audience = CLIENT_ID
        self.issuer: str | None = None
        self.codes: dict[str, dict[str, Any]] = {}
        self.access: dict[str, dict[str, Any]] = {}
        # Each authorization request's query, as it came.
        self.authorizations: list[dict[str, str]] = []
        self.refusals: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/.well-known/openid-configuration":
                    self._answer(200, server.discovery())
                elif url.path == "/jwks":
                    self._answer(200, server.jwks())
                elif url.path == "/authorize":
                    self._redirect(server.authorize(query))
                elif url.path == "/userinfo":
                    token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    self._answer(*server.userinfo_of(token))
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if urlsplit(self.path).path != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*server.token({k: v[0] for k, v in parse_qs(raw).items()}))

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.serve(port, Handler)

    # -- what it publishes
    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer or self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "userinfo_endpoint": f"{self.url}/userinfo",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": KID, "alg": "RS256", "use": "sig"}]}

    # -- the flow
    def authorize(self, query: dict[str, str]) -> str:
        with self.lock:
            self.authorizations.append(query)
        redirect_uri = query.get("redirect_uri", "")
        back: dict[str, str] = {"state": query.get("state", "")}
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            back["error"] = "unauthorized_client"
        elif query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            back["error"] = "invalid_request"
        else:
            code = secrets.token_urlsafe(16)
            with self.lock:
                self.codes[code] = {
                    "redirect_uri": redirect_uri,
                    "challenge": query["code_challenge"],
                    "nonce": query.get("nonce"),
                    "claims": dict(self.person),
                }
            back["code"] = code
        return f"{redirect_uri}?{urlencode(back)}"

    def _refuse(self, why: str, error: str = "invalid_grant") -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.refusals.append(why)
        return 400, {"error": error, "error_description": why}

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return self._refuse("unknown client", "invalid_client")
        if form.get("grant_type") != "authorization_code":
            return self._refuse("grant type", "unsupported_grant_type")
        with self.lock:
            issued = self.codes.pop(form.get("code", ""), None)
        if issued is None:
            return self._refuse("unknown or used code")
        if issued["redirect_uri"] != form.get("redirect_uri"):
            return self._refuse("redirect_uri differs")
        if s256(form.get("code_verifier", "")) != issued["challenge"]:
            return self._refuse("code_verifier does not match the code_challenge")
        access = secrets.token_urlsafe(16)
        with self.lock:
            self.access[access] = issued["claims"]
        return 200, {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": self.id_token(issued["claims"], nonce=issued["nonce"]),
        }

    def id_token(self, claims: dict[str, Any], *, nonce: str | None) -> str:
        now = int(time.time())
        payload = {
            **claims,
            "iss": self.issuer or self.url,
            "aud": self.audience,
            "iat": now if self.lifetime > 0 else now + self.lifetime - 60,
            "exp": now + self.lifetime,
        }
        if nonce is not None:
            payload["nonce"] = nonce
        return jwt.encode(payload, self.sign_with or self.key, algorithm="RS256", headers={"kid": KID})

    def userinfo_of(self, token: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            claims = self.access.get(token)
        if claims is None:
            return 401, {"error": "invalid_token"}
        if self.userinfo is None:
            return 200, claims
        return 200, {k: v for k, v in claims.items() if k in (*self.userinfo, "sub")}
