"""A throw-away certificate authority and a broker certificate for 127.0.0.1, made with the
openssl command line for tests of TLS towards Kafka (no key leaves the test's directory)."""

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA certificate clients trust
    keystore: Path  # the broker's key (PKCS#8) and certificate chain, one PEM file
    other_ca: Path  # a CA that signed nothing here: trusting it must fail the handshake


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert), cwd=directory,
    )  # fmt: skip
    return key, cert


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(directory, "test-ca")
    _, other_ca = _ca(directory, "other-ca")
    key, csr, cert = (directory / f"broker.{ext}" for ext in ("key", "csr", "pem"))
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(key), "-out", str(csr), cwd=directory,
    )  # fmt: skip
    extensions = directory / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(cert),
        cwd=directory,
    )  # fmt: skip
    pkcs8 = directory / "broker.pk8"
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", str(key), "-out", str(pkcs8), cwd=directory)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(pkcs8.read_text() + cert.read_text() + ca_cert.read_text())
    return Certificates(ca=ca_cert, keystore=keystore, other_ca=other_ca)
