"""A second listener for a local Kafka node that takes TLS and SASL logins (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), as a production broker does: what recon's Kafka security
(services.kafka_security) is tested against.

The node keeps its PLAINTEXT listener for the controller, its readiness check and the
project's tools; only what connects to `port` must log in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# The listener's name in server.properties (Kafka lower-cases it in per-listener keys).
NAME = "SECURE"


@dataclass(frozen=True)
class SecureListener:
    port: int
    # SASL_SSL, SASL_PLAINTEXT or SSL.
    protocol: str
    # user -> password, accepted by every mechanism.
    users: dict[str, str] = field(default_factory=dict)
    # A PEM file with the broker's private key (PKCS#8, unencrypted) and its certificate
    # chain; needed for the SSL protocols.
    keystore_pem: Path | None = None

    def __post_init__(self) -> None:
        if self.protocol not in ("SASL_SSL", "SASL_PLAINTEXT", "SSL"):
            raise ValueError(f"secure listener protocol {self.protocol!r}")
        if self.protocol.endswith("SSL") and self.keystore_pem is None:
            raise ValueError(f"{self.protocol} needs a keystore")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def server_properties(self) -> dict[str, str]:
        """What server.properties adds for this listener (the listener itself is added to
        `listeners`, `advertised.listeners` and the protocol map by the node)."""
        prefix = f"listener.name.{NAME.lower()}"
        settings: dict[str, str] = {}
        if self.protocol.startswith("SASL"):
            settings["sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
            plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.users.items())
            settings[f"{prefix}.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            )
            # SCRAM credentials live in the cluster's metadata (scram_format_args).
            for mechanism in MECHANISMS[1:]:
                settings[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        if self.keystore_pem is not None:
            settings["ssl.keystore.type"] = "PEM"
            settings["ssl.keystore.location"] = str(self.keystore_pem)
        return settings

    def scram_format_args(self) -> list[str]:
        """StorageTool arguments that store each user's SCRAM credentials when the node's
        storage is formatted (KRaft keeps them in the metadata log)."""
        if not self.protocol.startswith("SASL"):
            return []
        args: list[str] = []
        for user, password in self.users.items():
            for mechanism in MECHANISMS[1:]:
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args
