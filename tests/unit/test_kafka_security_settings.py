"""The RECON_KAFKA_* security variables (services.kafka_security.parse): what they turn into
for aiokafka, and the configuration errors that stop a process before it connects."""

import ssl
from pathlib import Path

import pytest

from services.kafka_security import KafkaSecurityError, parse

SASL = {
    "RECON_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
    "RECON_KAFKA_SASL_MECHANISM": "scram-sha-256",
    "RECON_KAFKA_SASL_USERNAME": "recon",
    "RECON_KAFKA_SASL_PASSWORD": "pw",
}


def test_plaintext_by_default_adds_nothing_but_the_protocol() -> None:
    assert parse({}).client_options() == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gives_every_client_the_login_and_a_verifying_tls_context() -> None:
    options = parse(SASL).client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert (options["sasl_mechanism"], options["sasl_plain_username"]) == ("SCRAM-SHA-256", "recon")
    assert options["sasl_plain_password"] == "pw"
    context = options["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_the_password_is_never_in_the_settings_repr() -> None:
    assert "pw" not in repr(parse(SASL)).replace("PLAINTEXT", "")


def test_a_password_file_is_read_without_its_trailing_newline(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-file\n")
    env = {**SASL, "RECON_KAFKA_SASL_PASSWORD": "", "RECON_KAFKA_SASL_PASSWORD_FILE": str(secret)}
    assert parse(env).password == "from-file"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RECON_KAFKA_SECURITY_PROTOCOL": "TLS"}, "RECON_KAFKA_SECURITY_PROTOCOL: 'TLS'"),
        ({**SASL, "RECON_KAFKA_SASL_MECHANISM": "GSSAPI"}, "RECON_KAFKA_SASL_MECHANISM"),
        ({**SASL, "RECON_KAFKA_SASL_USERNAME": ""}, "needs RECON_KAFKA_SASL_USERNAME"),
        ({**SASL, "RECON_KAFKA_SASL_PASSWORD_FILE": "/etc/hosts"}, "not both"),
        ({**SASL, "RECON_KAFKA_SASL_PASSWORD": "", "RECON_KAFKA_SASL_PASSWORD_FILE": "/nope"},
         "cannot read '/nope'"),
        ({"RECON_KAFKA_SSL_CA_FILE": "/no/such/ca.pem"}, "RECON_KAFKA_SSL_CA_FILE: no such file"),
        ({"RECON_KAFKA_SSL_KEY_FILE": "/etc/hosts"}, "without RECON_KAFKA_SSL_CERT_FILE"),
        ({"RECON_KAFKA_SSL_CHECK_HOSTNAME": "yes"}, "true or false"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_a_configuration_error_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(KafkaSecurityError, match=message.replace("*", r"\*")):
        parse(env)
