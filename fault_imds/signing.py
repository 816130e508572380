"""Signatures of the instance identity document, as IMDS serves them under
`dynamic/instance-identity/`: `pkcs7` and `rsa2048` (PKCS#7 signedData, DER, detached from the
document) and `signature` (a bare RSA-SHA256 signature), each base64 in 64-column lines.

AWS signs with its own regional keys, which nobody outside AWS holds, so a client that checks
against AWS's published certificates must fail here as it would against any forgery. These
blobs are real signatures by this process's own RSA-2048 key instead: well-formed, and
verifiable with the certificate embedded in the PKCS#7 blobs.
"""

from __future__ import annotations

import base64
import datetime
import functools
import threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding, pkcs7
from cryptography.x509.oid import NameOID

_lock = threading.Lock()
_identity: tuple[rsa.RSAPrivateKey, x509.Certificate] | None = None


def _signer() -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    # One key per process, made on first use (about 0.1 s): tests start many servers.
    global _identity
    with _lock:
        if _identity is None:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fault-imds")])
            now = datetime.datetime.now(datetime.UTC)
            cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=3650))
                .sign(key, hashes.SHA256())
            )
            _identity = (key, cert)
        return _identity


def _lines(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    return "\n".join(text[i : i + 64] for i in range(0, len(text), 64))


@functools.lru_cache(maxsize=8192)  # ~5 KB each
def sign_document(document: str) -> dict[str, str]:
    """{"pkcs7", "rsa2048", "signature"} for one identity document (cached per document: an
    instance's document changes rarely, and trees are re-rendered often)."""
    key, cert = _signer()
    data = document.encode()

    def signed_data() -> str:
        blob = (
            pkcs7.PKCS7SignatureBuilder()
            .set_data(data)
            .add_signer(cert, key, hashes.SHA256())
            .sign(Encoding.DER, [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary])
        )
        return _lines(blob)

    return {
        # AWS's `pkcs7` is DSA-SHA1, which no current library signs with: both are RSA-SHA256.
        "pkcs7": signed_data(),
        "rsa2048": signed_data(),
        "signature": _lines(key.sign(data, padding.PKCS1v15(), hashes.SHA256())),
    }
