"""Secure Kafka (issue 25, item 3): recon runs against a broker that takes only TLS and SASL
logins on the address it is given, and a refused login is a clear start-up error instead of
a process that retries forever. The broker and its certificates are made here, by the
project's own Kafka script (services.devtools.infra.secure_listener) and openssl."""

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.recon_client import transaction
from support.stack_fixtures import StackWith
from support.tls_certs import Certificates, make_certificates

from services import kafka_security
from services.config import load_settings
from services.devtools.infra._process import REPO_ROOT
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.secure_listener import SecureListener
from services.devtools.ports import free_port
from services.intake.console.kafka_counts import KafkaCounts
from services.intake.health import admin_client
from services.kafka_security import KafkaAccessDenied, KafkaSecurity

USER, PASSWORD = "recon-svc", "s3cret-recon-pass"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(
    certificates: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureListener]:
    listener = SecureListener(
        free_port(), "SASL_SSL", {USER: PASSWORD}, keystore_pem=certificates.keystore
    )
    broker = KafkaBroker(
        tmp_path_factory.mktemp("secure-kafka"), free_port(), free_port(), secure=listener
    )
    broker.start()
    try:
        yield listener
    finally:
        broker.stop()


def _security(
    certificates: Certificates, mechanism: str, password: str = PASSWORD
) -> KafkaSecurity:
    return KafkaSecurity("SASL_SSL", mechanism, USER, password, str(certificates.ca))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_mechanism_logs_in_and_a_wrong_password_is_refused(
    secure_broker: SecureListener, certificates: Certificates, mechanism: str
) -> None:
    await kafka_security.probe(secure_broker.bootstrap, _security(certificates, mechanism))
    with pytest.raises(KafkaAccessDenied, match=rf"refused {mechanism} login of user 'recon-svc'"):
        await kafka_security.probe(
            secure_broker.bootstrap, _security(certificates, mechanism, "wrong-password")
        )


async def test_a_broker_certificate_from_another_ca_is_refused(
    secure_broker: SecureListener, certificates: Certificates
) -> None:
    untrusting = KafkaSecurity("SASL_SSL", "PLAIN", USER, PASSWORD, str(certificates.other_ca))
    with pytest.raises(KafkaAccessDenied, match="certificate is not trusted"):
        await kafka_security.probe(secure_broker.bootstrap, untrusting)


def _env(
    listener: SecureListener, certificates: Certificates, password_file: Path
) -> dict[str, str]:
    return {
        "RECON_KAFKA_BOOTSTRAP": listener.bootstrap,
        "RECON_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "RECON_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "RECON_KAFKA_SASL_USERNAME": USER,
        "RECON_KAFKA_SASL_PASSWORD_FILE": str(password_file),
        "RECON_KAFKA_SSL_CA_FILE": str(certificates.ca),
    }


async def test_recon_commits_the_readme_transaction_through_a_tls_sasl_broker(
    secure_broker: SecureListener,
    certificates: Certificates,
    stack_with: StackWith,
    tmp_path: Path,
) -> None:
    password_file = tmp_path / "kafka-password"
    password_file.write_text(PASSWORD + "\n")
    async with stack_with(**_env(secure_broker, certificates, password_file)) as (_, recon):
        accepted = await recon.submit(transaction("secure-1"))
        assert accepted.status_code == 202, accepted.text
        tx = await recon.wait_terminal("secure-1")
        assert tx["status"] == "committed", tx


async def test_the_consoles_kafka_counts_log_in_to_a_tls_sasl_broker(
    secure_broker: SecureListener,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The console's counts consumer was once built from the bootstrap alone: against a
    # broker that takes only TLS and SASL it never answered, and the panel showed every
    # count as unknown.
    password_file = tmp_path / "kafka-password"
    password_file.write_text(PASSWORD + "\n")
    for name, value in _env(secure_broker, certificates, password_file).items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    admin = admin_client(settings)
    await admin.start()
    counts = KafkaCounts(settings, admin)
    try:
        found = await counts.counts()
    finally:
        await counts.close()
        await admin.close()
    # No recon topic exists on this broker: nothing dead-lettered (None: Kafka never answered).
    assert found["dead_letters"] == 0, found


async def test_a_wrong_kafka_password_stops_a_process_at_start_with_a_clear_error(
    secure_broker: SecureListener, certificates: Certificates, database_url: str, tmp_path: Path
) -> None:
    password_file = tmp_path / "kafka-password"
    password_file.write_text("not-the-password")
    env = {
        **os.environ,
        **_env(secure_broker, certificates, password_file),
        "RECON_DATABASE_URL": database_url,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.decider", cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # Without the start-up probe the decider would retry its login until killed.
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 2
    message = stderr.decode()
    assert "decider: Kafka access denied" in message, message
    assert "refused SCRAM-SHA-512 login of user 'recon-svc'" in message, message
    assert PASSWORD not in message and "not-the-password" not in message
