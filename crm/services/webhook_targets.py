"""Where an outbound webhook may go: the server-side request forgery guard.

A receiver URL names a host on the internet, never this machine, its cloud's
metadata service or the private network around it. So a target is refused
when it is not https while SEND_MODE is live, carries credentials, or any
address its host resolves to is loopback, link-local, private, multicast,
reserved, unspecified or otherwise not globally routable — unless the
operator sets WEBHOOK_ALLOW_PRIVATE (a receiver inside their own network).

The check runs when a subscription is saved and again before every delivery,
whose connection then goes to the very address checked (agents.webhooks.
transport): a name that resolved to a public address at save and to
127.0.0.1 since (DNS rebinding) is refused at delivery.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(ValueError):
    """The URL may not receive webhooks; the message says why."""


class TargetUnresolved(TargetRefused):
    """The host does not resolve (now): nothing can be sent to it."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as the URL names it (the TLS name and Host header)
    port: int
    path: str  # path and query, as sent
    addresses: tuple[str, ...]  # the checked addresses, in the resolver's order


def address_refusal(address: IPAddress) -> str | None:
    """Why this address may not be a receiver's (None: it may)."""
    if settings.WEBHOOK_ALLOW_PRIVATE:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:  # ::ffff:127.0.0.1 is 127.0.0.1
        address = mapped
    for label in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{label}"):
            return label.replace("_", "-")
    if not address.is_global:  # shared address space (100.64/10), documentation ranges…
        return "not public"
    return None


def target_check(url: str, *, resolve: bool = True) -> Target:
    """The URL as a checked target, or TargetRefused saying why not.

    `resolve`: look the host up and check every address it has (a name that
    does not resolve raises TargetUnresolved); without it only the URL and an
    address literal are checked."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    allowed = ("https",) if settings.SEND_MODE == "live" else ("https", "http")
    if scheme not in allowed:
        raise TargetRefused(f"the URL must be {' or '.join(allowed)}, not {scheme or 'schemeless'}")
    if parts.username or parts.password:
        raise TargetRefused("the URL may not carry a user name or password (use the signing secret)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise TargetRefused("the URL names no host")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused(f"bad port in the URL: {exc}") from exc
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    elif resolve:
        addresses = _resolve(host, port)
    else:
        addresses = []
    for address in addresses:
        refusal = address_refusal(address)
        if refusal:
            named = f"{host} resolves to {address}" if literal is None else f"{address}"
            raise TargetRefused(f"{named}, a {refusal} address: webhooks go to public receivers only")
    return Target(scheme, host, port, path, tuple(str(a) for a in addresses))


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetUnresolved(f"{host} does not resolve: {exc}") from exc
    found: list[IPAddress] = []
    for info in infos:
        # The scope of a link-local IPv6 address ("fe80::1%eth0") is not part of it.
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    if not found:
        raise TargetUnresolved(f"{host} has no address")
    return found
