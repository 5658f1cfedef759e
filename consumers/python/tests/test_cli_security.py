"""The command's TLS and SASL options become librdkafka's settings."""

import pytest

from deltaship_consumer.__main__ import kafka_security, parser


def settings(*argv: str) -> dict[str, str]:
    p = parser()
    return kafka_security(p.parse_args(["--kafka", "k:9093", "--topic", "t", *argv]), p)


def test_the_protocol_follows_from_tls_and_sasl(tmp_path):
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    sasl = ["--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "u", "--sasl-password-file", str(password)]
    assert settings() == {}
    assert settings("--tls") == {"security.protocol": "SSL"}
    assert settings("--tls-ca-file", "ca.pem", "--tls-cert-file", "c.pem", "--tls-key-file", "c.key") == {
        "security.protocol": "SSL",
        "ssl.ca.location": "ca.pem",
        "ssl.certificate.location": "c.pem",
        "ssl.key.location": "c.key",
    }
    assert settings(*sasl)["security.protocol"] == "SASL_PLAINTEXT"
    assert settings("--tls-ca-file", "ca.pem", *sasl) == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "s3cret",
    }


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--tls-cert-file", "c.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--sasl-mechanism", "PLAIN", "--sasl-username", "u"], "SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file together"),
        (["--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-file", "/nonexistent"], "--sasl-password-file: "),
        (["--sasl-mechanism", "SCRAM-SHA-1"], "invalid choice: 'SCRAM-SHA-1'"),
    ],
)
def test_options_given_wrong_are_named(argv, says, capsys):
    with pytest.raises(SystemExit) as exit:
        settings(*argv)
    assert exit.value.code == 2
    assert says in capsys.readouterr().err
