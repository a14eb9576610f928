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

# Query (and fragment) parameters whose value is a secret: access_token, api_key, X-Amz-Signature, pw...
_SECRET_NAME = re.compile(
    r"token|passw|pwd|(?<![a-z])pw(?![a-z])|secret|key|auth|credential|signature|sig$|session", re.IGNORECASE
)
_ANY_PARAM = re.compile(r"(?<=[?&;#])[^=&;#]+=[^&;#]*")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
# The host after a URL's last @, when what comes before it may be user info ("u:p/a#b?c@host/").
_HOST_AFTER_AT = re.compile(r"[A-Za-z0-9[][A-Za-z0-9.:\[\]%-]*(?=[/?#]|$)")
# Scheme-less user info in text: "slipway:s3cret@mlflow:5000" (not "models:/m@alias": no / after the colon).
_BARE_USERINFO = re.compile(r"(?<![^\s'\"(<,=;])[A-Za-z0-9._~%!$&*+-]+:[^\s/@'\"<>][^\s@'\"<>]*@(?=[A-Za-z0-9[])")
# name=value in free text whose name says secret: "pw=...", "password=...", "api_key=..." (also ; and , lists).
_TEXT_SECRET = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]*(?:passw|pwd|(?<![A-Za-z])pw(?![a-z])|secret|token|api[_-]?key|"
    r"access[_-]?key|credential)[A-Za-z0-9_.-]*)=([^\s&;,'\"<>]+)",
    re.IGNORECASE,
)


def _redact_params(text: str, drop: bool = False) -> str:
    """``a=1&token=x`` -> ``a=1&token=***`` (or without the pair if ``drop``); other text unchanged."""
    if "=" not in text:
        return text
    kept: list[str] = []
    for pair in re.split(r"(?<=[&;])", text):  # a=1&b=2 and a=1;b=2, each separator kept
        body, sep = (pair[:-1], pair[-1]) if pair[-1:] in ("&", ";") else (pair, "")
        name, eq, _ = body.partition("=")
        if eq and _SECRET_NAME.search(urllib.parse.unquote_plus(name)):
            if not drop:
                kept.append(f"{name}={REDACTED}{sep}")
        else:
            kept.append(pair)
    return "".join(kept).rstrip("&;") if drop else "".join(kept)


def _userinfo_end(url: str) -> int | None:
    """Where the user info of ``url`` ends (the index of its ``@``), or None without user info.

    The user info runs to the last ``@`` before the host. A password holding ``/``, ``?`` or ``#``
    (``https://u:p/a#b?c@host/``, as people type it) looks to a URL parser like a host, a path and
    a fragment: an ``@`` after the authority counts when a ``:`` precedes it and a host follows it."""
    start = url.find("://")
    if start < 0:
        return None
    start += 3
    at = url.rfind("@", start)
    if at < 0:
        return None
    authority_end = min((i for i in (url.find(c, start) for c in "/?#") if i >= 0), default=len(url))
    if at < authority_end:
        return at
    if ":" in url[start:at] and _HOST_AFTER_AT.match(url, at + 1):
        return at
    return None


def ambiguous_userinfo(url: str) -> bool:
    """The user info of ``url`` holds a ``/``, ``?`` or ``#`` (not percent-encoded): an HTTP client
    would read part of the password as the host, port or path, and quote it in its errors."""
    at = _userinfo_end(url)
    return at is not None and any(c in url[url.find("://") + 3 : at] for c in "/?#")


def _rewrite(url: str, drop: bool) -> str:
    at = _userinfo_end(url)
    if at is not None:  # the user info cut off first: no parser sees a password as a path
        prefix = url[: url.find("://") + 3]
        return prefix + ("" if drop else f"{REDACTED}@") + _rewrite(prefix + url[at + 1 :], drop)[len(prefix) :]
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        # Not parseable as a URL (e.g. a broken IPv6 host): still no secret parameter.
        return _ANY_PARAM.sub(lambda m: _redact_params(m.group(0), drop), url)
    netloc = parts.netloc
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
    """``text`` with every URL in it redacted (:func:`redact_url`), and outside URLs scheme-less user
    info (``user:pass@host`` -> ``***@host``) and secret-named ``name=value`` pairs (``pw=***``)."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    if "@" in text:
        text = _BARE_USERINFO.sub(f"{REDACTED}@", text)
    if "=" in text:
        text = _TEXT_SECRET.sub(lambda m: f"{m.group(1)}={REDACTED}" if m.group(2) != REDACTED else m.group(0), text)
    return text


def redact_log_records() -> None:
    """From now on every log record, whoever makes it, has the URLs in its message redacted: httpx
    logs each request's URL at INFO, user info included, and a library may log one in a warning.
    Installed once, at start-up (a record factory: it covers every logger and every handler, kopf's
    stream handler and its Events poster included). A record's traceback (``log.exception``, kopf's
    "handler failed") and stack are formatted here, redacted, into ``exc_text``: a formatter would
    otherwise format them later, after this factory, from the exception itself."""
    make = logging.getLogRecordFactory()
    if getattr(make, "slipway_redacts", False):
        return

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return record
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        redact_traceback(record)
        return record

    redacting.slipway_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting)


_TRACEBACKS = logging.Formatter()


def redact_traceback(record: logging.LogRecord) -> None:
    """The record's exception as redacted text in ``exc_text`` (which every formatter prints as it
    is) and no exception object left to format again; its stack (``stack_info``) redacted."""
    if record.exc_info and record.exc_info[0] is not None:
        record.exc_text = redact_text(_TRACEBACKS.formatException(record.exc_info))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


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
