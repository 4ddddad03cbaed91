"""Test certificates for TLS servers, made with the `openssl` command.

    certs = make_certs(directory)      # or: python3 tests/harness/tls.py DIR
    certs.ca, certs.server_cert, certs.server_key, certs.client_cert, ...

One call writes, into `directory`:

    ca.crt, ca.key                  the test CA
    server.crt, server.key          for 127.0.0.1 and localhost (SAN IP:127.0.0.1, DNS:localhost),
                                    signed by the CA; serverAuth + clientAuth (redis-server also
                                    presents it as a client: replication, sentinels)
    client.crt, client.key          a client certificate signed by the CA (mutual TLS)
    other-name.crt, other-name.key  signed by the CA for other.example only (hostname mismatch)
    wrong-ca.crt, wrong-ca.key      a second CA that signed nothing the servers trust
    unknown.crt, unknown.key        for 127.0.0.1/localhost, signed by the wrong CA (a server
                                    whose issuer the client does not know)

Keys are EC P-256 (fast to make; every OpenSSL since 1.0.2 and Redis take
them). Certificates are valid for two days from now. Nothing here is
secret: the directory lives as long as the tests that use it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

OTHER_NAME = "other.example"

_CA_EXT = """\
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""

_LEAF_EXT = """\
[v3_leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = {eku}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
{san}
"""

# A minimal config for `openssl req`, so that no system openssl.cnf adds
# extensions of its own.
_REQ_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
"""


@dataclass(frozen=True)
class Certs:
    dir: str

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")

    @property
    def server_cert(self) -> str:
        return self.path("server.crt")

    @property
    def server_key(self) -> str:
        return self.path("server.key")

    @property
    def client_cert(self) -> str:
        return self.path("client.crt")

    @property
    def client_key(self) -> str:
        return self.path("client.key")

    @property
    def wrong_ca(self) -> str:
        return self.path("wrong-ca.crt")

    def pair(self, which: str) -> tuple:
        """(cert, key) of a server certificate: "server", "other-name" or "unknown"."""
        return self.path(f"{which}.crt"), self.path(f"{which}.key")


def _openssl(*args: str, cwd: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("openssl not found (the test command installs it)")
    r = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {r.stderr.strip()}")


def _write(d: str, name: str, text: str) -> str:
    p = os.path.join(d, name)
    with open(p, "w") as fh:
        fh.write(text)
    return p


def _key(d: str, name: str) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", f"{name}.key", cwd=d)
    os.chmod(os.path.join(d, f"{name}.key"), 0o600)


def _ca(d: str, name: str, cn: str) -> None:
    _key(d, name)
    req = _write(d, f"{name}.req.cnf", _REQ_CNF.format(cn=cn))
    ext = _write(d, f"{name}.ext.cnf", _CA_EXT)
    _openssl("req", "-new", "-config", req, "-key", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    # self-signed with `x509 -req -signkey`: the extensions come from our file only
    _openssl("x509", "-req", "-in", f"{name}.csr", "-signkey", f"{name}.key", "-days", "2",
             "-extfile", ext, "-extensions", "v3_ca", "-set_serial", "1", "-out", f"{name}.crt", cwd=d)


def _leaf(d: str, name: str, cn: str, ca: str, eku: str, sans: str = "", serial: int = 2) -> None:
    _key(d, name)
    req = _write(d, f"{name}.req.cnf", _REQ_CNF.format(cn=cn))
    ext = _write(d, f"{name}.ext.cnf",
                 _LEAF_EXT.format(eku=eku, san=f"subjectAltName = {sans}" if sans else ""))
    _openssl("req", "-new", "-config", req, "-key", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-set_serial", str(serial), "-days", "2", "-extfile", ext, "-extensions", "v3_leaf",
             "-out", f"{name}.crt", cwd=d)


def make_certs(directory: str) -> Certs:
    """Writes the CA, server, client and mismatch certificates into directory
    (created if needed) and returns their paths. Done once per directory: a
    complete set already there is reused."""
    os.makedirs(directory, exist_ok=True)
    done = os.path.join(directory, ".complete")
    if not os.path.exists(done):
        d = directory
        _ca(d, "ca", "watchlock test CA")
        _ca(d, "wrong-ca", "watchlock unrelated test CA")
        _leaf(d, "server", "localhost", "ca", "serverAuth, clientAuth",
              "IP:127.0.0.1, DNS:localhost", serial=2)
        _leaf(d, "client", "watchlock-test-client", "ca", "clientAuth", serial=3)
        _leaf(d, "other-name", OTHER_NAME, "ca", "serverAuth, clientAuth", f"DNS:{OTHER_NAME}", serial=4)
        _leaf(d, "unknown", "localhost", "wrong-ca", "serverAuth, clientAuth",
              "IP:127.0.0.1, DNS:localhost", serial=5)
        for f in os.listdir(d):
            if f.endswith((".csr", ".cnf", ".srl")):
                os.unlink(os.path.join(d, f))
        open(done, "w").close()
    return Certs(directory)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: tls.py DIRECTORY   (writes the test CA and certificates there)")
    make_certs(sys.argv[1])
