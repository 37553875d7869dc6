"""HOST:PORT and nameserver parsing shared by the commands."""

import pytest

from feddns.errors import ConfigError
from feddns.hostport import parse_hostport, parse_ip_port


@pytest.mark.parametrize("text,default,expected", [
    ("127.0.0.1:53", None, ("127.0.0.1", 53)),
    ("[::1]:5353", None, ("::1", 5353)),
    ("localhost:0", None, ("localhost", 0)),
    ("1.2.3.4", 53, ("1.2.3.4", 53)),
    ("2001:db8::1", 53, ("2001:db8::1", 53)),
    ("[2001:db8::1]", 53, ("2001:db8::1", 53)),
])
def test_parse_hostport(text, default, expected):
    assert parse_hostport(text, default) == expected


@pytest.mark.parametrize("text", ["1.2.3.4:", "[::1]:", "1.2.3.4:²", "1.2.3.4:65536", "1.2.3.4:x", ":53", "[::1]x"])
def test_bad_hostport_is_a_config_error(text):
    with pytest.raises(ConfigError):
        parse_hostport(text, 53)


def test_nameserver_must_be_an_ip():
    assert str(parse_ip_port("[2001:db8::1]:5353", 53)[0]) == "2001:db8::1"
    with pytest.raises(ConfigError, match="not an IP address"):
        parse_ip_port("ns1.example.com", 53)

