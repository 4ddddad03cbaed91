"""TLS (rediss://) against real TLS-only redis-servers (`--port 0 --tls-port P`)
with certificates made by tests/harness/tls.py: verified connections, the
wake-up subscriber over TLS, insecure=1, a wrong CA, hostname mismatch and
sni=, mutual TLS, a plain server on a rediss:// URL, a handshake that never
ends, and bad option values."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

import watchlock
from conftest import wait_for
from helpers import lock_key
from redis_server import RedisServer
from tls import OTHER_NAME, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def tls_server(certs):
    with RedisServer(tls=certs) as srv:
        yield srv


@pytest.fixture
def tls_client(tls_server):
    with watchlock.Client(tls_server.url) as c:
        yield c


def open_fails(url: str, exc=watchlock.ConnectionError) -> tuple:
    """Client(url) must raise exc; returns (message, seconds it took)."""
    t0 = time.monotonic()
    with pytest.raises(exc) as info:
        watchlock.Client(url).close()
    return str(info.value), time.monotonic() - t0


def roundtrip(url: str, name: str) -> None:
    with watchlock.Client(url) as c:
        lock = c.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        assert lock.owned() and lock.fencing_token > 0
        lock.release()


def test_acquire_release_over_verified_tls(tls_server, tls_client, name):
    lock = tls_client.lock(name, ttl=10)
    assert lock.acquire(blocking=False)
    assert lock.owned() and lock.locked()
    assert tls_server.command("EXISTS", lock_key(name)) == 1
    assert tls_client.inspect(name).held
    with watchlock.Client(tls_server.url) as other:
        assert other.lock(name).acquire(blocking=False) is False
    lock.release()
    assert tls_server.command("EXISTS", lock_key(name)) == 0
    assert not lock.locked()


def test_url_forms_localhost_and_cacertdir(tls_server, certs, name):
    roundtrip(tls_server.tls_url(host="localhost", cacert=certs.ca), name)
    # a directory of CAs named by subject hash (as `openssl rehash` makes it) instead of one file
    cadir = os.path.join(certs.dir, "cadir")
    if not os.path.isdir(cadir):
        os.makedirs(cadir)
        h = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", certs.ca], capture_output=True,
                           text=True, check=True).stdout.strip()
        os.symlink(certs.ca, os.path.join(cadir, f"{h}.0"))
    roundtrip(tls_server.tls_url(cacertdir=cadir), name)


def test_waiter_is_woken_through_the_tls_subscriber(tls_server, tls_client, name):
    """A blocked waiter on another client is woken by the release (pub/sub
    over TLS), long before the 30 s lease could end."""
    holder = tls_client.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    with watchlock.Client(tls_server.url) as other:
        waiter = other.lock(name, ttl=30)
        got = {}

        def wait():
            got["ok"] = waiter.acquire(timeout=25)
            got["t"] = time.monotonic()

        th = threading.Thread(target=wait)
        th.start()
        channel = lock_key(name) + b":released"
        subscribed = wait_for(lambda: tls_server.command("PUBSUB", "NUMSUB", channel)[1] >= 1, timeout=20)
        assert subscribed, "the waiter never subscribed to the release channel"
        t_release = time.monotonic()
        holder.release()
        th.join(30)
        assert got.get("ok") is True
        assert got["t"] - t_release < 3.0, f"woken {got['t'] - t_release:.2f} s after the release"
        waiter.release()


def test_watchdog_renews_over_tls(tls_client, tls_server, name):
    lock = tls_client.lock(name, ttl=0.6)
    assert lock.acquire(blocking=False)
    # four renewals at ttl/3 take the hold well past its first lease
    assert wait_for(lambda: lock.renewals >= 4 or lock.lost, timeout=10)
    assert lock.owned() and not lock.lost
    assert tls_server.command("PTTL", lock_key(name)) > 0
    lock.release()


def test_insecure_accepts_a_server_of_an_unknown_ca(certs, name):
    with RedisServer(tls=certs, tls_cert="unknown") as srv:
        msg, _ = open_fails(srv.tls_url(cacert=certs.ca))
        assert "certificate" in msg and ("not trusted" in msg or "verify failed" in msg), msg
        msg, _ = open_fails(srv.tls_url())  # the system store does not know the test CAs either
        assert "certificate" in msg, msg
        roundtrip(srv.tls_url(insecure=1), name)
        roundtrip(srv.tls_url(cacert=certs.wrong_ca), name)  # its own CA: verified


def test_wrong_ca_is_a_clear_error(tls_server, certs):
    msg, _ = open_fails(tls_server.tls_url(cacert=certs.wrong_ca))
    assert "certificate" in msg and ("not trusted" in msg or "verify failed" in msg), msg
    assert str(tls_server.port) in msg, msg


def test_hostname_mismatch_and_sni(certs, tls_server, name):
    with RedisServer(tls=certs, tls_cert="other-name") as srv:
        for host in ("127.0.0.1", "localhost"):
            msg, _ = open_fails(srv.tls_url(host=host, cacert=certs.ca))
            assert "hostname mismatch" in msg, msg
        # the name to check is sni= when given
        roundtrip(srv.tls_url(cacert=certs.ca, sni=OTHER_NAME), name)
    msg, _ = open_fails(tls_server.tls_url(cacert=certs.ca, sni=OTHER_NAME))
    assert "hostname mismatch" in msg, msg
    roundtrip(tls_server.tls_url(cacert=certs.ca, sni="localhost"), name)
    roundtrip(tls_server.tls_url(cacert=certs.ca, sni=OTHER_NAME, insecure=1), name)


def test_mutual_tls(certs, name):
    with RedisServer(tls=certs, tls_auth_clients="yes") as srv:
        assert "cert=" in srv.url
        roundtrip(srv.url, name)
        with watchlock.Client(srv.url) as c:  # the subscriber presents the certificate too
            holder = c.lock(name, ttl=30)
            assert holder.acquire(blocking=False)
            with watchlock.Client(srv.url) as other:
                waiter = other.lock(name)
                th = threading.Thread(target=lambda: waiter.acquire(timeout=20))
                th.start()
                assert wait_for(lambda: srv.command("PUBSUB", "NUMSUB", lock_key(name) + b":released")[1] >= 1)
                holder.release()
                th.join(25)
                assert waiter.owned()
                waiter.release()
        msg, took = open_fails(srv.tls_url(cacert=certs.ca, connect_timeout="5s"))
        assert msg, "no message"
        assert took < 4.5, f"refusing a client without a certificate took {took:.1f} s"


def test_plain_server_on_a_rediss_url(redis_server, certs):
    """A plain redis-server never answers a ClientHello (it waits for the end
    of an inline command), so the error comes at connect_timeout and says
    that this may be a plain port (see tests/c/test_tls.c)."""
    url = f"rediss://127.0.0.1:{redis_server.port}?cacert={certs.ca}&connect_timeout=1s"
    msg, took = open_fails(url)
    assert "not a TLS server" in msg or "plain" in msg, msg
    assert took < 2.5, f"took {took:.2f} s with connect_timeout=1s"


def test_a_server_answering_in_plain_text_fails_fast(certs):
    """A plain-text answer to the ClientHello (what a RESP server says to
    garbage) ends the handshake at once: no waiting for connect_timeout."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)

        def answer():
            conn, _ = ls.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"-ERR unknown command\r\n")
        th = threading.Thread(target=answer, daemon=True)
        th.start()
        msg, took = open_fails(f"rediss://127.0.0.1:{ls.getsockname()[1]}?cacert={certs.ca}&connect_timeout=5s")
        th.join(5)
    assert "not a TLS server" in msg or "plain" in msg, msg
    assert took < 2.0, f"took {took:.2f} s with connect_timeout=5s"


def test_tls_client_on_a_plain_url_to_a_tls_port(tls_server):
    # the reverse mistake: redis:// to a TLS port is an error, not a hang
    msg, took = open_fails(f"redis://127.0.0.1:{tls_server.port}?connect_timeout=1s&command_timeout=1s")
    assert took < 4.0, took


def test_handshake_timeout(certs):
    """A listener that accepts (the kernel completes the TCP handshake) and
    never says a word: the error comes within connect_timeout."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        port = ls.getsockname()[1]
        msg, took = open_fails(f"rediss://127.0.0.1:{port}?cacert={certs.ca}&connect_timeout=700ms")
    assert "handshake timed out" in msg, msg
    assert 0.6 <= took < 2.5, f"took {took:.2f} s with connect_timeout=700ms"


def test_bad_tls_option_values_are_invalid_arguments(tls_server, certs, tmp_path):
    missing = str(tmp_path / "missing.pem")
    for opts in ({"cacert": missing}, {"cacertdir": str(tmp_path / "nodir")},
                 {"cacert": certs.ca, "cert": missing, "key": certs.client_key},
                 {"cacert": certs.ca, "cert": certs.client_cert, "key": missing},
                 {"cacert": certs.ca, "insecure": 2}):
        msg, _ = open_fails(tls_server.tls_url(**opts), exc=watchlock.InvalidArgument)
        assert msg, opts
    # TLS options need a TLS scheme
    open_fails(f"redis://127.0.0.1:{tls_server.port}?cacert={certs.ca}", exc=watchlock.InvalidArgument)
