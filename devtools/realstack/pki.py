"""The stack's certificates: one CA signs the serving certs, client certs and webhook certs,
and an RSA key signs service-account tokens (as kubeadm lays them out)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


class Pki:
    """A CA in ``directory`` (made on first use) that issues named key pairs."""

    def __init__(self, directory: Path, ca_name: str = "ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = KeyPair(self.dir / f"{ca_name}.crt", self.dir / f"{ca_name}.key")
        if not self.ca.cert.exists():
            self._make_ca(ca_name)
        self._ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), None)
        self._ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())

    def _make_ca(self, cn: str) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, f"trainjob-magics-realstack-{cn}")]
        )
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        _write(self.ca.key, _pem_key(key))
        _write(self.ca.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert.read_bytes()

    def issue(
        self,
        name: str,
        cn: str,
        *,
        orgs: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """``name.crt``/``name.key`` signed by the CA (reused when present)."""
        pair = KeyPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
            + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        )
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 365 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
        )
        alt = [x509.DNSName(d) for d in dns] + [
            x509.IPAddress(ipaddress.ip_address(i)) for i in ips
        ]
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        _write(pair.key, _pem_key(key))
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return pair

    def rsa_key(self, name: str) -> tuple[Path, Path]:
        """An RSA key pair (``name.key``, ``name.pub``), e.g. for service-account tokens."""
        private, public = self.dir / f"{name}.key", self.dir / f"{name}.pub"
        if not private.exists():
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write(private, _pem_key(key))
            pub = key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            _write(public, pub, 0o644)
        return private, public
