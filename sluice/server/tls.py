"""Druid's TLS listener settings (`druid.enableTlsPort`, `druid.tlsPort`, `druid.server.https.*`): a node serves HTTPS
on its TLS port, from the certificate and key in a PKCS #12 key store, beside its plaintext port.

Nodes call each other on the plaintext port, so `druid.enablePlaintextPort=false` is refused for now, as is a Java
key store (JKS), which only Java reads: `keytool -importkeystore -deststoretype pkcs12` converts one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from sluice.config import ConfigError, PropertyReader


@dataclass(frozen=True)
class TlsConfig:
    port: int
    key_store_path: Path
    key_store_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TlsConfig | None:
        """None when the TLS port is off (Druid's default)."""
        read = PropertyReader(properties)
        if not read.boolean("druid.enablePlaintextPort", True):
            raise ConfigError("druid.enablePlaintextPort: false is not supported: Sluice's nodes call each other "
                              "on the plaintext port (serve TLS beside it with druid.enableTlsPort=true)")
        if not read.boolean("druid.enableTlsPort", False):
            return None
        port = read.raw("druid.tlsPort") or ""
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"druid.tlsPort: [{port}] is not a port number (required with druid.enableTlsPort)")
        path = read.raw("druid.server.https.keyStorePath")
        if not path:
            raise ConfigError("druid.server.https.keyStorePath: required with druid.enableTlsPort")
        store_type = read.string("druid.server.https.keyStoreType", "pkcs12").lower()
        if store_type not in ("pkcs12", "p12"):
            raise ConfigError(f"druid.server.https.keyStoreType: [{store_type}] is not supported; convert the key "
                              "store to PKCS #12 (keytool -importkeystore -deststoretype pkcs12)")
        config = cls(int(port), Path(path), read.password("druid.server.https.keyStorePassword"))
        config._load()  # a key store that cannot be read fails the start, not the first request
        return config

    def pem_files(self, directory: Path) -> tuple[Path, Path]:
        """The key store's certificate chain and key as PEM files in `directory` (the key readable by this user
        only), as the HTTP server loads them."""
        key, certificate, chain = self._load()
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        certificate_file, key_file = directory / "server.crt", directory / "server.key"
        certificate_file.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM)
                                              for c in (certificate, *chain)))
        key_file.touch(mode=0o600)
        os.chmod(key_file, 0o600)
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return certificate_file, key_file

    def _load(self) -> tuple[Any, x509.Certificate, list[x509.Certificate]]:
        try:
            key, certificate, chain = pkcs12.load_key_and_certificates(
                self.key_store_path.read_bytes(),
                None if self.key_store_password is None else self.key_store_password.encode())
        except (OSError, ValueError) as error:
            raise ConfigError(f"druid.server.https.keyStorePath: cannot read the key store "
                              f"{self.key_store_path}: {error}") from None
        if key is None or certificate is None:
            raise ConfigError(f"druid.server.https.keyStorePath: {self.key_store_path} holds no key and certificate")
        return key, certificate, chain
