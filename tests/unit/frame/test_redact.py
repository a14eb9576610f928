"""What the operator writes about URLs and failed requests: never a credential, never a server's words."""

from __future__ import annotations

import io
import logging
import socket
import threading

import httpx
import pytest

from slipway.redact import (
    ambiguous_userinfo,
    redact_log_records,
    redact_text,
    redact_url,
    transport_failure,
    without_credentials,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://mlflow.mlflow:5000", "http://mlflow.mlflow:5000"),
        ("http://ops:s3cr3t@mlflow:5000/", "http://***@mlflow:5000/"),
        ("https://s3cr3t@mlflow.example.com/x", "https://***@mlflow.example.com/x"),
        ("http://a:b@c@host:1/p", "http://***@host:1/p"),  # everything before the last @
        ("http://prom:9090/api?token=s3cr3t&q=up", "http://prom:9090/api?token=***&q=up"),
        (
            "http://h/?access_token=a&api_key=b&Password=c&X-Amz-Signature=d",
            "http://h/?access_token=***&api_key=***&Password=***&X-Amz-Signature=***",
        ),
        ("http://h/?client_secret=x&sig=y&flag&page=2", "http://h/?client_secret=***&sig=***&flag&page=2"),
        ("http://h/#/experiments/3/runs/r1", "http://h/#/experiments/3/runs/r1"),  # MLflow UI links keep their route
        ("http://h/#access_token=x&state=1", "http://h/#access_token=***&state=1"),
        ("http://u:p@[::1:5000/?token=x&a=1", "http://***@[::1:5000/?token=***&a=1"),  # unparseable: all the same
        ("not a url", "not a url"),
        # A password holding / # ? as people type it: everything to the last @ is user info.
        ("https://u:p/a#b?c@host/", "https://***@host/"),
        ("http://slipway:s3cr/et?x#y@mlflow:5000/api/2.0", "http://***@mlflow:5000/api/2.0"),
        ("http://u:pa?ss@[::1]:5000/", "http://***@[::1]:5000/"),
        ("http://h/?pw=s3cr3t&pwd=a&passwd=b&db_pw=c", "http://h/?pw=***&pwd=***&passwd=***&db_pw=***"),
        ("http://h/?a=1;pwd=s3cr3t;b=2", "http://h/?a=1;pwd=***;b=2"),  # ; separates parameters too
        ("http://h/?pwm=1&pweek=2", "http://h/?pwm=1&pweek=2"),  # pw only as a word
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "plain"),
    [
        ("http://ops:s3cr3t@mlflow:5000", "http://mlflow:5000"),
        ("https://mlflow.example.com/?token=x&o=1", "https://mlflow.example.com/?o=1"),
        ("http://mlflow:5000/#/experiments/1", "http://mlflow:5000/#/experiments/1"),
        ("https://u:p/a#b?c@host/", "https://host/"),
        ("http://h/?a=1;pw=x;b=2", "http://h/?a=1;b=2"),
    ],
)
def test_without_credentials(url: str, plain: str) -> None:
    assert without_credentials(url) == plain


def test_redact_text_redacts_every_url_in_it() -> None:
    text = "MLflow at http://ops:pw@mlflow:5000 failed; see 'https://x/?token=t' or https://ok/"
    assert redact_text(text) == "MLflow at http://***@mlflow:5000 failed; see 'https://x/?token=***' or https://ok/"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("connecting to slipway:s3cret@mlflow:5000 failed", "connecting to ***@mlflow:5000 failed"),
        ("dsn='ops:pa/ss#w@db.internal'", "dsn='***@db.internal'"),
        ("url=slipway:s3cret@mlflow", "url=***@mlflow"),
        ("login pw=s3cret, pwd=a; passwd=b password=c", "login pw=***, pwd=***; passwd=*** password=***"),
        ("api_key=k1 client_secret=k2 token=k3", "api_key=*** client_secret=*** token=***"),
        # not credentials: an alias URI, an address, a ratio, a label
        ("models:/team-a-llm@production", "models:/team-a-llm@production"),
        ("ask ops@example.com at 3:30", "ask ops@example.com at 3:30"),
        ("replicas=3 step=2 reason=GateFailed", "replicas=3 step=2 reason=GateFailed"),
    ],
)
def test_redact_text_outside_urls(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_a_password_with_a_slash_is_ambiguous_until_percent_encoded() -> None:
    assert ambiguous_userinfo("http://slipway:s3cr/et@mlflow:5000")
    assert ambiguous_userinfo("https://u:p#x@host/")
    assert not ambiguous_userinfo("http://slipway:s3cr%2Fet@mlflow:5000/")
    assert not ambiguous_userinfo("http://mlflow:5000/x")


def _listening(reply: bytes) -> tuple[socket.socket, str]:
    """A TCP server on 127.0.0.1 that sends ``reply`` to whoever connects, then hangs up."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return server, f"http://127.0.0.1:{server.getsockname()[1]}/"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        # httpx's own messages would quote these: illegal status line: bytearray(b'SSH-2.0-...')
        (b"SSH-2.0-OpenSSH_9.6 secret-banner\r\n\r\n", "it answered something that is not HTTP"),
        (b"HTTP/1.1 200 OK\r\nsecret-banner without a colon\r\n\r\n", "it answered something that is not HTTP"),
        (b"", "it closed the connection without answering"),
    ],
)
def test_transport_failures_never_quote_the_server(reply: bytes, reason: str) -> None:
    server, url = _listening(reply)
    with server, pytest.raises(httpx.HTTPError) as caught:
        httpx.get(url, timeout=5)
    assert reason in transport_failure(caught.value)
    assert "secret-banner" not in transport_failure(caught.value)


def test_transport_failure_of_a_refused_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        with pytest.raises(httpx.HTTPError) as caught:
            httpx.get(f"http://127.0.0.1:{s.getsockname()[1]}/", timeout=5)
    assert transport_failure(caught.value) == "it refused the connection"


def test_transport_failure_of_a_silent_server() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()  # accepts, never answers
        with pytest.raises(httpx.HTTPError) as caught:
            httpx.get(f"http://127.0.0.1:{s.getsockname()[1]}/", timeout=0.3)
    assert transport_failure(caught.value) == "it did not answer in time"


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.ConnectError("[Errno -2] Name or service not known"), "its host name does not resolve"),
        (httpx.ConnectError("[Errno 101] Network is unreachable"), "there is no route to it"),
        (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] not valid for 'internal.x'"), "the TLS handshake failed"),
        (httpx.ConnectError("something new"), "the connection failed"),
        (httpx.ConnectTimeout("timed out"), "the connection timed out"),
        (httpx.DecodingError("gzip: bytes of the body"), "its answer could not be decoded"),
        (httpx.TooManyRedirects("to http://elsewhere"), "the request failed (TooManyRedirects)"),
    ],
)
def test_transport_failure_words(exc: httpx.HTTPError, reason: str) -> None:
    assert transport_failure(exc).startswith(reason)


def test_log_records_of_any_logger_carry_no_credentials():
    import logging

    redact_log_records()
    redact_log_records()  # installed once, however often called
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("httpx")
    handler = Keep()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info('HTTP Request: %s %s "%s"', "GET", "http://slipway:s3cret@mlflow:5000/api/2.0/x?token=t0k", "200")
        logger.warning("plain %d", 3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = [r.getMessage() for r in records]
    assert text == ['HTTP Request: GET http://***@mlflow:5000/api/2.0/x?token=*** "200"', "plain 3"]


def _captured(logger: logging.Logger, formatter: logging.Formatter) -> io.StringIO:
    """What a real stream handler with ``formatter`` writes for ``logger`` (its records kept to it)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    logger.propagate = False
    return out


def _fail(url: str) -> None:
    raise RuntimeError(f"MLflow at {url} failed")


def test_a_traceback_logged_by_log_exception_carries_no_credentials():
    redact_log_records()
    log = logging.getLogger("slipway.test.traceback")
    out = _captured(log, logging.Formatter("%(levelname)s %(message)s"))
    try:
        try:
            _fail("http://slipway:s3cr/et?x#y@mlflow:5000/api")
        except RuntimeError as exc:
            raise ValueError("again: login slipway:hunter2@db pw=s3cr3t2") from exc
    except ValueError:
        log.exception("a pass failed")
    log.error("with a stack", stack_info=True, extra={})
    text = out.getvalue()
    assert "Traceback (most recent call last)" in text and "in _fail" in text  # the traceback is there
    assert "RuntimeError: MLflow at http://***@mlflow:5000/api failed" in text
    assert "ValueError: again: login ***@db pw=***" in text
    for secret in ("s3cr", "et?x#y", "hunter2", "s3cr3t2"):
        assert secret not in text, secret


@pytest.mark.parametrize("log_format", ["FULL", "JSON"])
def test_kopfs_own_formatters_print_the_redacted_traceback(log_format: str):
    import kopf
    from kopf._core.actions.loggers import make_formatter

    redact_log_records()
    log = logging.getLogger(f"slipway.test.kopf.{log_format}")
    out = _captured(log, make_formatter(log_format=kopf.LogFormat[log_format]))
    try:
        _fail("https://u:p/a#b?c@host/")
    except RuntimeError as exc:
        # as kopf reports a handler's failure: the exception in the message and its traceback
        log.exception(f"Handler 'x' failed with an exception. Will retry: {exc}")
    text = out.getvalue()
    assert "_fail" in text and "https://***@host/" in text
    assert "u:p" not in text and "a#b?c" not in text
