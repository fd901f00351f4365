"""How recon authenticates to Kafka and encrypts its connections: TLS and SASL (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) from the RECON_KAFKA_* variables, the same for every client
of every process (services.kafka_clients.connection), and a start-up probe that turns a
refused login into a clear error instead of a process that retries forever.

Read from the environment rather than carried on Settings: clients are built in helpers that
are handed only a bootstrap address (topic set-up, the decider's restore, the audit's
readers), and every process of a deployment reads the same variables anyway.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass, field
from functools import cache
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Every variable this module reads, with its default (services.config.DEFAULTS holds them
# too, so the configuration reference lists them).
DEFAULTS: dict[str, str] = {
    "RECON_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
    "RECON_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "RECON_KAFKA_SASL_USERNAME": "",
    "RECON_KAFKA_SASL_PASSWORD": "",
    "RECON_KAFKA_SASL_PASSWORD_FILE": "",
    "RECON_KAFKA_SSL_CA_FILE": "",
    "RECON_KAFKA_SSL_CERT_FILE": "",
    "RECON_KAFKA_SSL_KEY_FILE": "",
    "RECON_KAFKA_SSL_CHECK_HOSTNAME": "true",
}
# How long the start-up probe waits for one broker's answer; an unreachable broker is not
# the probe's business (the process waits for Kafka as before), a refused login is.
PROBE_TIMEOUT_S = 10.0


class KafkaSecurityError(ValueError):
    """A RECON_KAFKA_* security variable is missing or malformed (a configuration error)."""


class KafkaAccessDenied(RuntimeError):
    """The broker refused this process's credentials or certificate: retrying cannot help."""


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    # Never logged (repr=False): it ends up in error reports otherwise.
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def client_options(self) -> dict[str, Any]:
        """The aiokafka constructor arguments (every client type takes the same ones)."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_tls:
            options["ssl_context"] = _ssl_context(self)
        if self.uses_sasl:
            options |= {
                "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password,
            }
        return options


def _ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    # The system's trust store unless a CA file is named: a broker with a public
    # certificate needs no configuration beyond the protocol.
    context = ssl.create_default_context(cafile=security.ca_file or None)
    context.check_hostname = security.check_hostname
    # TLS 1.2 at most: over TLS 1.3 a Java broker does not answer a client's close_notify
    # (jdk.tls.acknowledgeCloseNotify is off by default), and uvloop, recon's event loop,
    # then waits its 30 s SSL shutdown timeout before a closed connection counts as closed:
    # every consumer stop (the decider's restore of each partition) took 30 s, long enough
    # for the decider to miss its group session (measured: 31 s per restore over TLS 1.3,
    # 1.2 s over TLS 1.2). Kafka brokers accept TLS 1.2 by default (ssl.enabled.protocols).
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    if security.cert_file:
        context.load_cert_chain(security.cert_file, security.key_file or None)
    return context


def parse(env: dict[str, str]) -> KafkaSecurity:
    """The security the variables in `env` describe (missing ones take DEFAULTS)."""

    def value(name: str) -> str:
        return env.get(name, DEFAULTS[name]).strip()

    protocol = value("RECON_KAFKA_SECURITY_PROTOCOL").upper()
    if protocol not in PROTOCOLS:
        raise KafkaSecurityError(
            f"RECON_KAFKA_SECURITY_PROTOCOL: {protocol!r} is not one of {', '.join(PROTOCOLS)}"
        )
    files = {
        name: value(name) or None
        for name in (
            "RECON_KAFKA_SSL_CA_FILE",
            "RECON_KAFKA_SSL_CERT_FILE",
            "RECON_KAFKA_SSL_KEY_FILE",
        )
    }
    for name, path in files.items():
        if path and not os.path.isfile(path):
            raise KafkaSecurityError(f"{name}: no such file {path!r}")
    if files["RECON_KAFKA_SSL_KEY_FILE"] and not files["RECON_KAFKA_SSL_CERT_FILE"]:
        raise KafkaSecurityError(
            "RECON_KAFKA_SSL_KEY_FILE is set without RECON_KAFKA_SSL_CERT_FILE; a client "
            "certificate needs both (or the key inside the certificate file)"
        )
    check = value("RECON_KAFKA_SSL_CHECK_HOSTNAME").lower()
    if check not in ("true", "false"):
        raise KafkaSecurityError(f"RECON_KAFKA_SSL_CHECK_HOSTNAME: true or false, got {check!r}")
    security = KafkaSecurity(
        protocol=protocol,
        ca_file=files["RECON_KAFKA_SSL_CA_FILE"],
        cert_file=files["RECON_KAFKA_SSL_CERT_FILE"],
        key_file=files["RECON_KAFKA_SSL_KEY_FILE"],
        check_hostname=check == "true",
    )
    if not security.uses_sasl:
        return security
    mechanism = value("RECON_KAFKA_SASL_MECHANISM").upper()
    if mechanism not in MECHANISMS:
        raise KafkaSecurityError(
            f"RECON_KAFKA_SASL_MECHANISM: {mechanism!r} is not one of {', '.join(MECHANISMS)}"
        )
    username = value("RECON_KAFKA_SASL_USERNAME")
    password = _password(
        value("RECON_KAFKA_SASL_PASSWORD"), value("RECON_KAFKA_SASL_PASSWORD_FILE")
    )
    if not username or not password:
        raise KafkaSecurityError(
            f"{protocol} needs RECON_KAFKA_SASL_USERNAME and RECON_KAFKA_SASL_PASSWORD "
            "(or RECON_KAFKA_SASL_PASSWORD_FILE)"
        )
    return KafkaSecurity(
        protocol=protocol,
        mechanism=mechanism,
        username=username,
        password=password,
        ca_file=security.ca_file,
        cert_file=security.cert_file,
        key_file=security.key_file,
        check_hostname=security.check_hostname,
    )


def _password(inline: str, path: str) -> str:
    if inline and path:
        raise KafkaSecurityError(
            "set RECON_KAFKA_SASL_PASSWORD or RECON_KAFKA_SASL_PASSWORD_FILE, not both"
        )
    if not path:
        return inline
    try:
        with open(path) as secret:
            # One trailing newline is the file's, not the password's (echo, editors).
            return secret.read().removesuffix("\n")
    except OSError as error:
        raise KafkaSecurityError(
            f"RECON_KAFKA_SASL_PASSWORD_FILE: cannot read {path!r} ({error.strerror})"
        ) from None


def configured() -> KafkaSecurity:
    """The security this process's environment describes."""
    return _parsed(tuple((name, os.environ.get(name)) for name in DEFAULTS))


@cache
def _parsed(variables: tuple[tuple[str, str | None], ...]) -> KafkaSecurity:
    # Keyed on the variables' values: parsed (and its password file read) once per
    # process, yet a test that changes the environment gets what it set.
    return parse({name: value for name, value in variables if value is not None})


async def probe(bootstrap: str, security: KafkaSecurity) -> None:
    """Log in to the first bootstrap broker that answers; raise KafkaAccessDenied if it
    refuses the credentials or the TLS handshake fails on a certificate. A broker that
    does not answer is left to the clients, which wait for Kafka as they always did."""
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaError

    options = security.client_options()
    for address in filter(None, (part.strip() for part in bootstrap.split(","))):
        host, _, port = address.rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    host, int(port), request_timeout_ms=int(PROBE_TIMEOUT_S * 1000), **options
                ),
                PROBE_TIMEOUT_S,
            )
        except ssl.SSLCertVerificationError as error:
            raise KafkaAccessDenied(
                f"TLS to Kafka at {address}: the broker's certificate is not trusted "
                f"({error.verify_message}); check RECON_KAFKA_SSL_CA_FILE"
            ) from None
        except ssl.SSLError as error:
            raise KafkaAccessDenied(f"TLS to Kafka at {address} failed: {error}") from None
        except KafkaError as error:
            if _is_auth_failure(error):
                raise KafkaAccessDenied(
                    f"Kafka at {address} refused {security.mechanism} login of user "
                    f"{security.username!r}: {error}; check RECON_KAFKA_SASL_USERNAME, "
                    "RECON_KAFKA_SASL_PASSWORD(_FILE) and RECON_KAFKA_SASL_MECHANISM"
                ) from None
            continue
        except (OSError, TimeoutError):
            continue
        conn.close()
        return


def _is_auth_failure(error: Exception) -> bool:
    from aiokafka.errors import (
        AuthenticationFailedError,
        IllegalSaslStateError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    )

    refusals = (
        SaslAuthenticationFailed,
        AuthenticationFailedError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
    )
    return isinstance(error, refusals)
