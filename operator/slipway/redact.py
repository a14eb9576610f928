"""What the operator may say about URLs and remote failures: no credentials, no server's words.

Everything the operator writes (status, conditions, Events, logs) that names a URL goes through
:func:`redact_url`; a link people click, or an address given to a pod, through
:func:`without_credentials`. A failed HTTP exchange is described by :func:`transport_failure`
in a fixed vocabulary, because some transport errors quote the bytes a server sent (an SSH or
Redis banner on a port that was supposed to be HTTP).
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from typing import Any

import httpx

REDACTED = "***"

# Query (and fragment) parameters whose value is a secret: access_token, api_key, X-Amz-Signature...
_SECRET_NAME = re.compile(r"token|passw|pwd|secret|key|auth|credential|signature|sig$|session", re.IGNORECASE)
_ANY_PARAM = re.compile(r"(?<=[?&#])[^=&#]+=[^&#]*")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def _redact_params(text: str, drop: bool = False) -> str:
    """``a=1&token=x`` -> ``a=1&token=***`` (or without the pair if ``drop``); other text unchanged."""
    if "=" not in text:
        return text
    kept: list[str] = []
    for pair in text.split("&"):
        name, eq, _ = pair.partition("=")
        if eq and _SECRET_NAME.search(urllib.parse.unquote_plus(name)):
            if not drop:
                kept.append(f"{name}={REDACTED}")
        else:
            kept.append(pair)
    return "&".join(kept)


def _rewrite(url: str, drop: bool) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        # Not parseable as a URL (e.g. a broken IPv6 host): still no user info, no secret parameter.
        url = re.sub(r"//[^/?#]*@", "//" + ("" if drop else REDACTED + "@"), url)
        return _ANY_PARAM.sub(lambda m: _redact_params(m.group(0), drop), url)
    netloc = parts.netloc
    if "@" in netloc:
        host = netloc.rpartition("@")[2]
        netloc = host if drop else f"{REDACTED}@{host}"
    query = _redact_params(parts.query, drop)
    fragment = _redact_params(parts.fragment, drop)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_url(url: str) -> str:
    """``url`` as the operator may write it: ``user:password@`` becomes ``***@``, and the values of
    query parameters named like a secret (token, password, secret, key, ...) become ``***``."""
    return _rewrite(url, drop=False)


def without_credentials(url: str) -> str:
    """``url`` with no credentials at all (no user info, no secret-named query parameters): for a
    link people open in a browser, or an address a pod gets while its credentials come from a Secret."""
    return _rewrite(url, drop=True)


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def redact_log_records() -> None:
    """From now on every log record, whoever makes it, has the URLs in its message redacted: httpx
    logs each request's URL at INFO, user info included, and a library may log one in a warning.
    Installed once, at start-up (a record factory: it covers every logger and every handler)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "slipway_redacts", False):
        return

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return record
        if "://" in message:
            redacted = redact_text(message)
            if redacted != message:
                record.msg, record.args = redacted, ()
        return record

    redacting.slipway_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting)


# Words of the operating system (not of the server) that say why a connection failed.
_CONNECT_REASONS = (
    (("not known", "nodename nor servname", "name resolution", "getaddrinfo"), "its host name does not resolve"),
    (("connection refused",), "it refused the connection"),
    (("network is unreachable", "no route to host"), "there is no route to it"),
    (("certificate", "ssl", "tls"), "the TLS handshake failed (certificate or protocol)"),
)


# Each kind of failure in words, most specific first.
_FAILURES: tuple[tuple[type[httpx.HTTPError], str], ...] = (
    (httpx.ConnectTimeout, "the connection timed out"),
    (httpx.TimeoutException, "it did not answer in time"),
    (httpx.ProxyError, "the HTTP proxy refused the request"),
    (httpx.ConnectError, "the connection failed"),
    (httpx.ProtocolError, "it answered something that is not HTTP"),
    (httpx.UnsupportedProtocol, "the address is not an http(s) URL"),
    (httpx.DecodingError, "its answer could not be decoded"),
)


def transport_failure(exc: httpx.HTTPError) -> str:
    """Why an HTTP exchange failed, in a fixed vocabulary: never the text of the exception, which
    may quote what the server sent (``illegal status line: b'SSH-2.0-OpenSSH...'``)."""
    text = str(exc).lower()
    if isinstance(exc, httpx.ConnectError):
        reason = next((r for needles, r in _CONNECT_REASONS if any(n in text for n in needles)), None)
        if reason is not None:
            return reason
    if isinstance(exc, httpx.RemoteProtocolError) and "disconnected" in text:
        return "it closed the connection without answering"
    return next(
        (words for kind, words in _FAILURES if isinstance(exc, kind)), f"the request failed ({type(exc).__name__})"
    )
