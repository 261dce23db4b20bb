"""Passwords as Druid's basic authenticator keeps them: PBKDF2WithHmacSHA512, a 32-byte random salt, a 512-bit key,
10,000 iterations by default; stored as `{"salt", "hash", "iterations"}` with the bytes in base64, as Jackson writes
Java byte arrays."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

SALT_BYTES = 32
KEY_BYTES = 64
DEFAULT_ITERATIONS = 10_000


@dataclass(frozen=True)
class Credentials:
    salt: bytes
    hash: bytes
    iterations: int

    @classmethod
    def for_password(cls, password: str, iterations: int = DEFAULT_ITERATIONS) -> Credentials:
        salt = os.urandom(SALT_BYTES)
        return cls(salt, _hash(password, salt, iterations), iterations)

    def verify(self, password: str) -> bool:
        return hmac.compare_digest(self.hash, _hash(password, self.salt, self.iterations))

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Credentials:
        return cls(base64.b64decode(document["salt"]), base64.b64decode(document["hash"]), int(document["iterations"]))

    def to_json(self) -> dict[str, Any]:
        return {"salt": base64.b64encode(self.salt).decode(), "hash": base64.b64encode(self.hash).decode(),
                "iterations": self.iterations}


def _hash(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, dklen=KEY_BYTES)
