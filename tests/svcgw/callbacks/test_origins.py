"""The origin of a callback address: scheme, host and port, normalised."""

from __future__ import annotations

import pytest

from svcgw.callbacks.origins import origin, same_origin


def test_default_ports_host_case_and_spelling_are_one_origin() -> None:
    assert origin("HTTPS://Hooks.Example.COM./a?b=1") == ("https", "hooks.example.com", 443)
    assert origin("http://[::1]:80/") == ("http", "::1", 80)
    assert same_origin("https://h.example/a", "https://H.example:443/b#x")
    assert same_origin("http://127.0.0.1/a", "http://127.0.0.1:80")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("https://h.example/a", "http://h.example/a"),
        ("https://h.example/a", "https://h.example:8443/a"),
        ("https://h.example/a", "https://other.example/a"),
        (None, "https://h.example/a"),
        ("https://h.example/a", ""),
        ("not a url", "not a url"),
    ],
)
def test_anything_else_is_another_origin(one: str | None, other: str | None) -> None:
    assert not same_origin(one, other)
