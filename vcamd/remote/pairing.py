"""Mutual TLS between `vcamd serve` and its clients, and the one bundle that pairs a client.

`vcamd serve` makes (once, then reuses) a private certificate authority, a server certificate and
a client certificate (`cryptography`), and gives Triton the server's pair and the CA
(`--grpc-use-ssl-mutual`: a client without a certificate from this CA is refused during the
handshake) — on loopback too. Listening beyond this machine, it writes one pairing bundle: the
server's address, the CA, the client's certificate and key. `vcamd pair BUNDLE` on the client keeps
it privately; a client talking to a server that is not on its own machine uses it, and refuses to
go without it. A client on the server's own machine, as its user, reads the same files from the
server's state folder (`local_pairing`).

The trust is the pinned private CA, not a host name: the server's certificate names
`SERVER_NAME`, and the client checks that name whatever address it dials (an IP, a DNS name, a
forwarded port). Every file is 0600 in 0700 folders (`vcamd.files.private_files`).

The client's key is the only key to the server, and it lives in files (0600), never on a command
line: Triton's other gate, a restricted-protocol header, takes its secret only as an argument
(`--grpc-restricted-protocol=...:KEY=VALUE`), which every local user reads in /proc/PID/cmdline.
So another local user, who cannot read the key, can neither drive nor read the server.
"""

from __future__ import annotations

import datetime
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from vcamd.common.errors import VcamdError
from vcamd.config.address import ServerAddress
from vcamd.files.private_files import private_dir, write_private_atomic

SERVER_NAME = "vcamd-serve"
"""The name in the server's certificate, checked by every client whatever address it dials."""
VALID_DAYS = 825
"""How long the certificates stay valid (the longest browsers accept for a leaf; a new pairing renews them)."""
BUNDLE_KIND = "vcamd-triton-pairing"


def state_dir() -> Path:
    """The server's private folder: certificates and keys."""
    from vcamd.config.folders import user_data_dir

    return user_data_dir() / "serve"


def pairings_dir() -> Path:
    """Where a client keeps the bundles of the servers it was paired with."""
    from vcamd.config.folders import user_data_dir

    return user_data_dir() / "pairings"


@dataclass(frozen=True, slots=True)
class Pairing:
    """What a client needs to reach one server over mutual TLS (PEM bytes)."""

    server: str
    ca: bytes
    certificate: bytes
    key: bytes

    def to_json(self) -> str:
        return json.dumps({"kind": BUNDLE_KIND, "server": self.server, "server_name": SERVER_NAME, "ca": self.ca.decode(),
                           "certificate": self.certificate.decode(), "key": self.key.decode()}, indent=1)

    @classmethod
    def from_json(cls, text: str, origin: str) -> Pairing:
        try:
            data = json.loads(text)
            if data.get("kind") != BUNDLE_KIND:
                raise ValueError("not a pairing bundle")
            # An older bundle's "token" is ignored: the server no longer has one.
            return cls(str(data["server"]), data["ca"].encode(), data["certificate"].encode(), data["key"].encode())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise VcamdError(f"{origin} is not a vcamd pairing bundle ({exc})",
                             fix="use the file `vcamd serve` wrote when it started listening beyond its machine") from None


@dataclass(frozen=True, slots=True)
class ServerCredentials:
    """The server's side: files Triton reads (`--grpc-server-cert`, `-key`, `--grpc-root-cert`)."""

    certificate: Path
    key: Path
    ca: Path


CLIENT_FILES = ("client.pem", "client.key")
"""In the server's state folder: the client's certificate and key (a bundle carries the same)."""


def local_pairing(folder: Path | None = None) -> Pairing | None:
    """The pairing of a server run by this user on this machine (read from its state folder), or
    None when none has run here."""
    folder = folder or state_dir()
    try:
        ca, certificate, key = ((folder / name).read_bytes() for name in ("ca.pem", *CLIENT_FILES))
    except OSError:
        return None
    return Pairing("", ca, certificate, key)


def server_credentials(folder: Path | None = None, *, renew: bool = False) -> tuple[ServerCredentials, Pairing]:
    """The server's certificate files and a client's pairing, made on first use (or `renew`)."""
    folder = folder or state_dir()
    private_dir(folder)
    files = ServerCredentials(folder / "server.pem", folder / "server.key", folder / "ca.pem")
    client_cert, client_key = (folder / name for name in CLIENT_FILES)
    made = [files.certificate, files.key, files.ca, client_cert, client_key]
    if renew or not all(p.is_file() for p in made) or _expiring(files.certificate) or _expiring(client_cert):
        _make_all(files, client_cert, client_key)
    pairing = Pairing("", files.ca.read_bytes(), client_cert.read_bytes(), client_key.read_bytes())
    return files, pairing


def write_bundle(pairing: Pairing, server: ServerAddress, path: Path) -> Path:
    """The client's pairing bundle for `server`, 0600."""
    private_dir(path.parent)
    write_private_atomic(path, Pairing(server.url, pairing.ca, pairing.certificate, pairing.key).to_json())
    return path


def install_bundle(source: Path, server: ServerAddress | None = None) -> tuple[Path, ServerAddress]:
    """`vcamd pair`: keep the bundle privately under the server's address (the bundle's own, or
    `server` when the client reaches it by another); returns where and for which address."""
    try:
        text = source.read_text()
    except OSError as exc:
        raise VcamdError(f"cannot read the pairing bundle {source}: {exc.strerror or exc}", fix="check the path") from None
    pairing = Pairing.from_json(text, str(source))
    address = server or ServerAddress.parse(pairing.server)
    path = pairing_path(address)
    private_dir(path.parent)
    write_private_atomic(path, Pairing(address.url, pairing.ca, pairing.certificate, pairing.key).to_json())
    return path, address


def pairing_path(server: ServerAddress) -> Path:
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in server.host)
    return pairings_dir() / f"{safe}_{server.port}.json"


def pairing_for(server: ServerAddress) -> Pairing | None:
    """The bundle a client was paired with for `server`, or None."""
    path = pairing_path(server)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise VcamdError(f"cannot read the pairing for {server} ({path}): {exc.strerror or exc}", fix="run `vcamd pair BUNDLE` again") from None
    return Pairing.from_json(text, str(path))


# ---- certificates ---------------------------------------------------------------------------------


def _expiring(path: Path) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return True
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < datetime.timedelta(days=30)


def _make_all(files: ServerCredentials, client_cert: Path, client_key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "FaceLive Camera"), x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"vcamd serve CA {secrets.token_hex(4)}")  # a new CA's own name: an old pairing never verifies against it
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(common: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(common)).issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)

    server_pem, server_key = leaf(SERVER_NAME, ExtendedKeyUsageOID.SERVER_AUTH, [x509.DNSName(SERVER_NAME)])
    client_pem, client_key_pem = leaf("vcamd client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    for path, data in ((files.key, server_key), (files.certificate, server_pem), (client_key, client_key_pem), (client_cert, client_pem),
                       (files.ca, ca.public_bytes(serialization.Encoding.PEM))):
        write_private_atomic(path, data)
