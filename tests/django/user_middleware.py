"""An application's own middleware (user code): it only passes the request on."""
from __future__ import annotations


class PassThrough:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)           # not the write: a report must not name this
        return response
