from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from svcgw.callbacks.addresses import (
    INVALID_URL,
    OWN_ADDRESS,
    UNUSABLE_ADDRESS,
    AddressError,
    CallbackUrl,
    check_callback_url,
    filter_addresses,
    forbidden_reason,
    own_targets,
    port_allowed,
)
from svcgw.config.settings import DEFAULT_DESTINATION_PORTS, INTERNAL_SERVICE_PORTS, Settings, SettingsError
from tests.support import fake_resolver

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"


PUBLIC_DNS = fake_resolver({"example.com": [PUBLIC_V4, PUBLIC_V6], "gw.example.net": ["203.0.113.7"]})


# --- forbidden_reason --------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        # IPv4
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this-network"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.254", "CGNAT"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("169.254.169.254", "link-local"),
        ("192.0.0.9", "reserved"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.1", "documentation"),
        ("192.88.99.1", "reserved"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        # IPv6
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fec0::1", "site-local"),
        ("fc00::1", "unique-local"),
        ("fd12:3456:789a::1", "unique-local"),
        ("ff02::1", "multicast"),
        ("100::1", "discard-only"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001:2::1", "benchmarking"),
        ("2001:10::1", "reserved"),
        ("5f00::1", "reserved"),
        ("4000::1", "reserved"),
        ("::1:0:0:0", "reserved"),
        # IPv4 inside IPv6
        ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
        ("::ffff:10.0.0.1", "private (IPv4-mapped)"),
        ("::ffff:169.254.169.254", "link-local (IPv4-mapped)"),
        ("::127.0.0.1", "loopback (IPv4-compatible)"),
        ("::8.8.8.8", "reserved (IPv4-compatible)"),
        ("::ffff:0:127.0.0.1", "loopback (IPv4-translated)"),
        ("2002:7f00:1::1", "loopback (6to4)"),
        ("2002:c0a8:101::1", "private (6to4)"),
        ("64:ff9b::127.0.0.1", "loopback (NAT64)"),
        ("64:ff9b::10.0.0.1", "private (NAT64)"),
        ("64:ff9b::100.64.0.1", "CGNAT (NAT64)"),
        ("64:ff9b:1::a00:1", "reserved (NAT64 local-use)"),
        ("64:ff9b:1:a00:1::", "reserved (NAT64 local-use)"),
        # Teredo: the client address is stored inverted (here 127.0.0.1 and 8.8.8.8).
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback (Teredo)"),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "reserved (Teredo)"),
    ],
)
def test_forbidden(address: str, reason: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        PUBLIC_V4,
        "100.63.255.255",
        "100.128.0.0",
        "172.32.0.1",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700:4700::1111",
        PUBLIC_V6,
        "::ffff:8.8.8.8",
        "2002:808:808::1",
        "64:ff9b::8.8.8.8",
    ],
)
def test_public(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("address", "allow"),
    [
        ("127.0.0.1", "127.0.0.0/8"),
        ("10.9.8.7", "10.0.0.0/8"),
        ("::1", "::1/128"),
        ("fd00::5", "fd00::/8"),
        # Embedded forms are allowed by their IPv4 address too.
        ("::ffff:127.0.0.1", "127.0.0.0/8"),
        ("2002:7f00:1::1", "127.0.0.0/8"),
        ("64:ff9b::10.0.0.1", "10.0.0.0/8"),
    ],
)
def test_allow_list_permits(address: str, allow: str) -> None:
    ip = ipaddress.ip_address(address)
    assert forbidden_reason(ip) is not None
    assert forbidden_reason(ip, [ipaddress.ip_network(allow)]) is None


def test_allow_list_is_exact() -> None:
    allow = [ipaddress.ip_network("127.0.0.0/8")]
    assert forbidden_reason(ipaddress.ip_address("10.0.0.1"), allow) == "private"
    assert forbidden_reason(ipaddress.ip_address("::1"), allow) == "loopback"


# --- check_callback_url: -40011 ----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        None,
        42,
        b"http://example.com/",
        "",
        "example.com/hook",
        "/relative/hook",
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com/",
        "javascript:alert(1)",
        "http://",
        "http:///path",
        "http://exa mple.com/",
        " http://example.com/",
        "http://example.com/\n",
        "http://example.com/\thook",
        "http://example.com/\x00",
        "http://exa\u200bmple.com/",
        "http://example.com\\@127.0.0.1/",
        "http://example.com:0/",
        "http://example.com:99999/",
        "http://example.com:port/",
        "http://[::1/",
        "http://[127.0.0.1]/",
        "http://ex%61mple.com/",
        "http://exa<mple.com/",
        "http://example.com/" + "a" * 2048,
    ],
)
def test_invalid_url(url: object) -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url(url, resolve=PUBLIC_DNS)
    assert info.value.code == INVALID_URL


def test_credentials_refused_and_not_echoed() -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url("https://alice:s3cret@example.com/hook?token=abc", resolve=PUBLIC_DNS)
    assert info.value.code == INVALID_URL
    for secret in ("alice", "s3cret", "token", "abc"):
        assert secret not in str(info.value)
        assert secret not in repr(info.value)


def test_messages_never_echo_query() -> None:
    for url in (
        "ftp://example.com/?key=k3y",
        "http://10.0.0.1/?key=k3y",
        "http://nowhere.invalid/?key=k3y",
    ):
        with pytest.raises(AddressError) as info:
            check_callback_url(url, resolve=PUBLIC_DNS)
        assert "k3y" not in str(info.value)


# --- check_callback_url: accepted ----------------------------------------------


def test_accepts_public_url() -> None:
    checked = check_callback_url("HTTPS://Example.COM/hook?x=1", resolve=PUBLIC_DNS)
    assert checked == CallbackUrl(
        url="HTTPS://Example.COM/hook?x=1",
        scheme="https",
        host="example.com",
        port=443,
        addresses=(PUBLIC_V4, PUBLIC_V6),
    )


def test_accepts_public_literals() -> None:
    assert check_callback_url("http://8.8.8.8:8080/").port == 8080
    assert check_callback_url("http://[2606:4700:4700::1111]/").host == "2606:4700:4700::1111"


# --- check_callback_url: -40012 ----------------------------------------------

OWN = ("http", "127.0.0.1", 8080)
ALLOW_LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/",
        "https://127.0.0.1:8080/anything",
        "http://127.0.0.1:8080/svc/receiver/abc",
        "http://[::ffff:127.0.0.1]:8080/",
        "http://localhost:8080/",
        "http://2130706433:8080/",
    ],
)
def test_own_origin(url: str) -> None:
    resolve = fake_resolver({"localhost": ["127.0.0.1", "::1"]})
    with pytest.raises(AddressError) as info:
        check_callback_url(url, own_origins=[OWN], allow=ALLOW_LOOPBACK, resolve=resolve)
    assert info.value.code == OWN_ADDRESS


def test_own_origin_checked_before_resolving() -> None:
    origin = ("https", "gw.example.net", 443)
    with pytest.raises(AddressError) as info:
        check_callback_url("http://GW.example.net.:443/x", own_origins=[origin], resolve=fake_resolver({}))
    assert info.value.code == OWN_ADDRESS


def test_own_origin_by_address() -> None:
    origin = ("https", "gw.example.net", 443)
    resolve = fake_resolver({"gw.example.net": ["203.0.113.7"], "alias.example.org": ["203.0.113.7"]})
    allow = [ipaddress.ip_network("203.0.113.0/24")]
    with pytest.raises(AddressError) as info:
        check_callback_url("https://alias.example.org/hook", own_origins=[origin], allow=allow, resolve=resolve)
    assert info.value.code == OWN_ADDRESS


def test_other_port_is_not_own() -> None:
    checked = check_callback_url(
        "http://127.0.0.1:9999/hook", own_origins=[OWN], allow=ALLOW_LOOPBACK, resolve=PUBLIC_DNS
    )
    assert checked.port == 9999


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/in/abc123",
        "https://HOOKS.example.com:443/in/abc123",
        "https://hooks.example.com/in/",
        "https://hooks.example.com/%69n/abc",
        "https://hooks.example.com/other/../in/abc",
    ],
)
def test_own_prefix(url: str) -> None:
    resolve = fake_resolver({"hooks.example.com": [PUBLIC_V4]})
    with pytest.raises(AddressError) as info:
        check_callback_url(url, own_prefixes=["https://hooks.example.com/in/"], resolve=resolve)
    assert info.value.code == OWN_ADDRESS


def test_outside_own_prefix_is_fine() -> None:
    resolve = fake_resolver({"hooks.example.com": [PUBLIC_V4]})
    checked = check_callback_url(
        "https://hooks.example.com/elsewhere", own_prefixes=["https://hooks.example.com/in/"], resolve=resolve
    )
    assert checked.host == "hooks.example.com"


# --- check_callback_url: -40013 ----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://0x7f.1/",
        "http://2130706433/",
        "http://017700000001/",
        "http://0.0.0.0/",
        "http://[::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[2002:7f00:1::1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fd00::1]/",
        "http://[fe80::1%25eth0]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://100.64.0.1/",
        "http://198.18.0.1/",
        "http://240.0.0.1/",
        "http://255.255.255.255/",
    ],
)
def test_internal_literal(url: str) -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url(url, resolve=fake_resolver({}))
    assert info.value.code == UNUSABLE_ADDRESS


def test_unresolvable() -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url("https://nowhere.invalid/hook", resolve=PUBLIC_DNS)
    assert info.value.code == UNUSABLE_ADDRESS
    assert "does not resolve" in str(info.value)


def test_empty_answer_is_unresolvable() -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url("https://empty.example/", resolve=fake_resolver({"empty.example": []}))
    assert info.value.code == UNUSABLE_ADDRESS


def test_name_resolving_to_private() -> None:
    resolve = fake_resolver({"internal.example.com": ["10.1.2.3"]})
    with pytest.raises(AddressError) as info:
        check_callback_url("https://internal.example.com/", resolve=resolve)
    assert info.value.code == UNUSABLE_ADDRESS
    assert "private" in str(info.value)
    assert "10.1.2.3" not in str(info.value)


def test_one_private_answer_is_enough_to_refuse() -> None:
    resolve = fake_resolver({"mixed.example.com": [PUBLIC_V4, "127.0.0.1"]})
    with pytest.raises(AddressError) as info:
        check_callback_url("https://mixed.example.com/", resolve=resolve)
    assert info.value.code == UNUSABLE_ADDRESS
    assert "loopback" in str(info.value)


def test_allow_list_lets_internal_through() -> None:
    resolve = fake_resolver({"dev.local": ["127.0.0.1"]})
    checked = check_callback_url("http://dev.local:9000/hook", allow=ALLOW_LOOPBACK, resolve=resolve)
    assert checked.addresses == ("127.0.0.1",)
    checked = check_callback_url("http://127.1:9000/", allow=ALLOW_LOOPBACK)
    assert checked.addresses == ("127.0.0.1",)


# --- filter_addresses ----------------------------------------------------------


def test_filter_keeps_public_and_drops_internal() -> None:
    resolve = fake_resolver({"mixed.example.com": ["127.0.0.1", PUBLIC_V4, "::1", PUBLIC_V6]})
    assert filter_addresses("mixed.example.com", 443, resolve=resolve) == [PUBLIC_V4, PUBLIC_V6]


def test_filter_dedupes() -> None:
    resolve = fake_resolver({"twice.example.com": [PUBLIC_V4, PUBLIC_V4]})
    assert filter_addresses("twice.example.com", 80, resolve=resolve) == [PUBLIC_V4]


def test_filter_only_internal() -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.1", "10.0.0.1"]})
    with pytest.raises(AddressError) as info:
        filter_addresses("rebind.example", 80, resolve=resolve)
    assert info.value.code == UNUSABLE_ADDRESS
    assert "only to internal addresses" in str(info.value)


def test_filter_unresolvable() -> None:
    with pytest.raises(AddressError) as info:
        filter_addresses("nowhere.invalid", 80, resolve=PUBLIC_DNS)
    assert info.value.code == UNUSABLE_ADDRESS
    assert "does not resolve" in str(info.value)


def test_filter_literals_skip_the_resolver() -> None:
    def no_lookups(host: str, port: int) -> list[str]:
        raise AssertionError(f"looked up {host}")

    assert filter_addresses("8.8.8.8", 80, resolve=no_lookups) == ["8.8.8.8"]
    assert filter_addresses("0x7f.1", 80, ALLOW_LOOPBACK, resolve=no_lookups) == ["127.0.0.1"]
    with pytest.raises(AddressError):
        filter_addresses("2130706433", 80, resolve=no_lookups)


def test_filter_allow_list() -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.1", "10.0.0.1"]})
    assert filter_addresses("rebind.example", 80, ALLOW_LOOPBACK, resolve) == ["127.0.0.1"]


def test_filter_refuses_the_services_own_address_at_connect_time() -> None:
    # Saved while the name pointed elsewhere; at send it points at the service's own origin.
    settings = Settings.from_env({"SVCGW_PUBLIC_URL": "https://gw.example.net"})
    own = own_targets(settings)
    resolve = fake_resolver({"rebind.example": ["8.8.4.4"], "gw.example.net": ["8.8.4.4"]})
    with pytest.raises(AddressError) as info:
        filter_addresses("rebind.example", 443, resolve=resolve, own=own)
    assert info.value.code == -40012 and "own address" in info.value.message
    with pytest.raises(AddressError) as named:
        filter_addresses("GW.example.net.", 443, resolve=resolve, own=own)
    assert named.value.code == -40012
    # Another port of the same host is not the service; among several answers, only its own is dropped.
    assert filter_addresses("rebind.example", 8443, resolve=resolve, own=own) == ["8.8.4.4"]
    both = fake_resolver({"rebind.example": ["8.8.4.4", PUBLIC_V4], "gw.example.net": ["8.8.4.4"]})
    assert filter_addresses("rebind.example", 443, resolve=both, own=own) == [PUBLIC_V4]
    # Without its own targets, the rule is not applied (what the address was before).
    assert filter_addresses("rebind.example", 443, resolve=resolve) == ["8.8.4.4"]


def test_filter_with_system_resolver() -> None:
    # "localhost" resolves from the hosts file, without the network.
    with pytest.raises(AddressError):
        filter_addresses("localhost", 80)
    assert filter_addresses("localhost", 80, [*ALLOW_LOOPBACK, ipaddress.ip_network("::1/128")])


# --- destination ports -------------------------------------------------------


@pytest.mark.parametrize("url", ["http://8.8.8.8:22/", "https://example.com:25/", "http://example.com:1023/"])
def test_privileged_ports_other_than_web_are_refused(url: str) -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url(url, resolve=PUBLIC_DNS)
    assert info.value.code == UNUSABLE_ADDRESS and "SVCGW_DESTINATION_PORTS" in str(info.value)
    with pytest.raises(AddressError):
        filter_addresses(urlsplit(url).hostname or "", urlsplit(url).port or 0, resolve=PUBLIC_DNS)


@pytest.mark.parametrize("url", ["http://example.com/", "https://example.com/", "http://example.com:8443/"])
def test_web_and_unprivileged_ports_are_allowed(url: str) -> None:
    assert check_callback_url(url, resolve=PUBLIC_DNS).host == "example.com"


@pytest.mark.parametrize("port", [3306, 5432, 6379, 27017, 9200, 11211, 26379, 2379, 6443])
def test_well_known_internal_service_ports_are_refused_by_default(port: int) -> None:
    with pytest.raises(AddressError) as info:
        check_callback_url(f"http://example.com:{port}/", resolve=PUBLIC_DNS)
    assert info.value.code == UNUSABLE_ADDRESS and INTERNAL_SERVICE_PORTS[port] in info.value.message
    with pytest.raises(AddressError):
        filter_addresses("example.com", port, resolve=PUBLIC_DNS)  # and again at connect time
    # The setting, when given, says every port allowed: the default's denials are not added to it.
    ports = Settings.from_env({"SVCGW_DESTINATION_PORTS": "1024-65535"}).destination_ports
    assert check_callback_url(f"http://example.com:{port}/", resolve=PUBLIC_DNS, ports=ports).port == port


def test_the_default_ports_are_the_web_and_unprivileged_ones_but_internal_services() -> None:
    allowed = {port for port in range(1, 65536) if port_allowed(port)}
    assert allowed == {80, 443, *range(1024, 65536)} - set(INTERNAL_SERVICE_PORTS)
    assert Settings.from_env({}).destination_ports == DEFAULT_DESTINATION_PORTS


def test_every_internal_service_port_is_named_in_the_security_docs() -> None:
    text = (Path(__file__).parents[3] / "docs" / "security.md").read_text()
    for port, service in INTERNAL_SERVICE_PORTS.items():
        assert f"{port} ({service})" in text, port


def test_the_port_list_is_a_setting() -> None:
    ports = Settings.from_env({"SVCGW_DESTINATION_PORTS": "443, 8000-8999"}).destination_ports
    assert ports == ((443, 443), (8000, 8999))
    assert check_callback_url("https://example.com:8080/", resolve=PUBLIC_DNS, ports=ports).port == 8080
    with pytest.raises(AddressError):
        check_callback_url("http://example.com/", resolve=PUBLIC_DNS, ports=ports)
    assert filter_addresses("example.com", 8999, resolve=PUBLIC_DNS, ports=ports)
    for bad in ("0", "80-79", "http", "70000"):
        with pytest.raises(SettingsError, match="SVCGW_DESTINATION_PORTS"):
            Settings.from_env({"SVCGW_DESTINATION_PORTS": bad})
