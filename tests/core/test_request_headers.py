"""The headers a sampler sees: read from the WSGI environ or the ASGI scope only when asked,
with the lower-case names and values a dict of all of them would have."""
from __future__ import annotations

from txnsafety.request_headers import ASGIHeaders, EnvironHeaders


def test_a_wsgi_environ_answers_by_lower_case_name_and_lists_only_headers():
    environ = {"HTTP_X_STAFF": "1", "HTTP_ACCEPT_LANGUAGE": "fr", "CONTENT_TYPE": "text/plain",
               "PATH_INFO": "/a", "wsgi.input": object(), "HTTP_X_BYTES": b"not text"}
    headers = EnvironHeaders(environ)
    assert headers.get("x-staff") == "1" and headers["Accept-Language"] == "fr"
    assert headers.get("content-type") == "text/plain"
    assert headers.get("path-info") is None and headers.get("x-bytes") is None and headers.get(7) is None
    assert dict(headers) == {"x-staff": "1", "accept-language": "fr", "content-type": "text/plain"}
    assert "x-staff" in headers and "x-missing" not in headers and len(headers) == 3


def test_an_asgi_header_list_answers_by_lower_case_name_the_last_of_a_repeated_one():
    headers = ASGIHeaders([(b"X-Staff", b"0"), (b"accept", b"*/*"), (b"x-staff", b"1")])
    assert headers.get("x-staff") == "1" and headers["ACCEPT"] == "*/*"
    assert headers.get("x-missing") is None and headers.get(None) is None
    assert dict(headers) == {"x-staff": "1", "accept": "*/*"} and len(headers) == 2
