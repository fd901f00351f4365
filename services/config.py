"""Settings from the environment, checked once at start-up.

Every recon process reads the same variables, so one environment describes a whole
deployment; a bad value stops the process before it touches Kafka or Postgres.
"""

import os
from dataclasses import dataclass, field

from events.topics import Topics


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable and the fix."""


def _pairs(name: str, raw: str) -> dict[str, str]:
    """Parse "a=b,c=d" into {"a": "b", "c": "d"}."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        left, sep, right = item.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise ConfigError(f"{name}: expected comma-separated name=value pairs, got {item!r}")
        out[left.strip()] = right.strip()
    return out


def _float(name: str, default: str) -> float:
    raw = os.environ.get(name, default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name}: must be positive, got {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str
    database_url: str
    topics: Topics
    environment: str
    # API key -> tenant. The key names the tenant; request bodies never do.
    api_keys: dict[str, str] = field(default_factory=dict)
    # provider name -> base URL of its API
    providers: dict[str, str] = field(default_factory=dict)
    intake_host: str = "127.0.0.1"
    intake_port: int = 8080
    provider_timeout_s: float = 5.0

    @property
    def group_prefix(self) -> str:
        return self.topics.prefix


def load_settings() -> Settings:
    env = os.environ
    api_keys = _pairs("RECON_API_KEYS", env.get("RECON_API_KEYS", "demo-key=demo"))
    for tenant in api_keys.values():
        if not tenant.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"RECON_API_KEYS: tenant {tenant!r} may hold only [A-Za-z0-9_-]")
    port = env.get("RECON_INTAKE_PORT", "8080")
    if not port.isdigit():
        raise ConfigError(f"RECON_INTAKE_PORT: expected a port number, got {port!r}")
    return Settings(
        kafka_bootstrap=env.get("RECON_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        database_url=env.get("RECON_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        topics=Topics(env.get("RECON_TOPIC_PREFIX", "")),
        environment=env.get("RECON_ENVIRONMENT", "dev"),
        api_keys=api_keys,
        providers=_pairs(
            "RECON_PROVIDERS", env.get("RECON_PROVIDERS", "sandbox=http://127.0.0.1:8090")
        ),
        intake_host=env.get("RECON_INTAKE_HOST", "127.0.0.1"),
        intake_port=int(port),
        provider_timeout_s=_float("RECON_PROVIDER_TIMEOUT_S", "5"),
    )
