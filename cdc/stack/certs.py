"""Certificates for a secure stack (``cdc stack up --secure``) and the TLS tests: a private
CA, and server and client certificates it signs (``cryptography``; PEM files, keys 0600).

Not a PKI: one CA per state directory, made once and kept, certificates for the names the
stack's servers are reached by (``localhost``, ``127.0.0.1``).  Production servers use the
certificates their operators give them; the pipeline's settings name the CA that signed
them (``source.ssl.ca``, ``kafka.security.ca``, the PostgreSQL DSN's ``sslrootcert``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The names the stack's servers are reached by.
LOCAL_NAMES = ("localhost", "127.0.0.1")
_VALID = dt.timedelta(days=825)


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key (PEM paths)."""

    cert: str
    key: str


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _alt_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


class CertificateAuthority:
    """A CA under ``root`` (``ca.pem``, ``ca.key``), made on first use and kept."""

    def __init__(self, root: Path, name: str = "cdc stack CA") -> None:
        self.root = root
        self.cert_path = root / "ca.pem"
        self.key_path = root / "ca.key"
        if not (self.cert_path.exists() and self.key_path.exists()):
            self._make(name)
        self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        self._private = serialization.load_pem_private_key(self.key_path.read_bytes(), None)

    def _make(self, name: str) -> None:
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + _VALID)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        _write(self.key_path, _key_pem(key), 0o600)
        _write(self.cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)

    @property
    def ca(self) -> str:
        return str(self.cert_path)

    def issue(self, name: str, hosts: tuple[str, ...] = LOCAL_NAMES, *, client: bool = False,
              replace: bool = False) -> CertFiles:
        """``<root>/<name>.pem`` and ``.key``: a server certificate for ``hosts`` (or, ``client``,
        a client certificate whose common name is ``name``), made unless it exists."""
        cert_path, key_path = self.root / f"{name}.pem", self.root / f"{name}.key"
        if cert_path.exists() and key_path.exists() and not replace:
            return CertFiles(str(cert_path), str(key_path))
        key = _key()
        now = dt.datetime.now(dt.timezone.utc)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name if client else hosts[0])]))
                   .issuer_name(self._cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + _VALID)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._cert.public_key()),
                                  critical=False))
        if not client:
            builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        cert = builder.sign(self._private, hashes.SHA256())
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return CertFiles(str(cert_path), str(key_path))


def pkcs12_keystore(files: CertFiles, path: Path, password: str) -> str:
    """``files``' certificate and key as a PKCS#12 key store at ``path`` (0600), protected by
    ``password``: what Java servers (Kafka) read.  Made again each time (cheap, and it follows
    a certificate issued anew)."""
    from cryptography.hazmat.primitives.serialization import pkcs12
    cert = x509.load_pem_x509_certificate(Path(files.cert).read_bytes())
    key = serialization.load_pem_private_key(Path(files.key).read_bytes(), None)
    blob = pkcs12.serialize_key_and_certificates(b"server", key, cert, None,  # type: ignore[arg-type]
                                                 serialization.BestAvailableEncryption(password.encode()))
    _write(path, blob, 0o600)
    return str(path)
