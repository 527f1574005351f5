"""Production settings: what a process refuses to start without, what only the demo gets, and
the documented production environment passing Django's deployment checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.deploy import ENV_FILE, GENERATED, env_file_variables, production_environment

ROOT = Path(__file__).resolve().parent.parent
# deploy/neocloud.env.example, the documented production environment, with a throwaway value for
# each one the file leaves to be generated.
PRODUCTION = production_environment()


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``manage.py`` in a fresh process with only ``env`` (nothing of this test run's own)."""
    base = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env={**base, "DJANGO_SETTINGS_MODULE": "neocloud.settings", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def setting(name: str, env: dict[str, str]) -> str:
    result = manage(
        "shell", "-c", f"from django.conf import settings; print(settings.{name})", env=env
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_documented_production_environment_is_the_env_file() -> None:
    page = (ROOT / "docs" / "operations" / "processes.md").read_text()
    included = re.findall(r'^--8<-- "([^"]+)"$', page, flags=re.MULTILINE)

    assert included == [ENV_FILE.relative_to(ROOT).as_posix()]


def test_the_env_file_leaves_empty_only_what_must_be_generated() -> None:
    variables = env_file_variables()

    assert {name for name, value in variables.items() if not value} == set(GENERATED)
    assert set(PRODUCTION) == set(variables)
    assert {n: v for n, v in PRODUCTION.items() if n not in GENERATED} == {
        n: v for n, v in variables.items() if n not in GENERATED
    }


def test_the_production_environment_passes_the_deployment_checks() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_a_production_database_without_stripe_refuses_to_start() -> None:
    env = {k: v for k, v in PRODUCTION.items() if not k.startswith("STRIPE_")}

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "STRIPE_API_KEY, STRIPE_WEBHOOK_SECRET must be set" in result.stderr


def test_a_production_database_without_secrets_keys_refuses_to_start() -> None:
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRETS_KEYS"}

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "SECRETS_KEYS must be set" in result.stderr


def test_an_empty_webhook_secret_refuses_to_start() -> None:
    result = manage("check", env={**PRODUCTION, "STRIPE_WEBHOOK_SECRET": ""})

    assert result.returncode != 0
    assert "STRIPE_WEBHOOK_SECRET must be set" in result.stderr


def test_stripe_configured_on_sqlite_needs_its_webhook_secret(tmp_path: Path) -> None:
    env = {"NEOCLOUD_VAR_DIR": str(tmp_path), "SECRET_KEY": "s", "STRIPE_API_KEY": "sk_test_x"}

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "STRIPE_WEBHOOK_SECRET must be set" in result.stderr


def test_only_the_embedded_default_simulates_payments(tmp_path: Path) -> None:
    embedded = {"NEOCLOUD_VAR_DIR": str(tmp_path), "SECRET_KEY": "s"}

    assert setting("STRIPE_SIMULATED", embedded) == "True"
    assert setting("STRIPE_SIMULATED", PRODUCTION) == "False"


def test_sqlite_without_the_demo_has_debug_off_and_needs_a_secret_key(tmp_path: Path) -> None:
    embedded = {"NEOCLOUD_VAR_DIR": str(tmp_path)}

    refused = manage("check", env=embedded)

    assert refused.returncode != 0
    assert "SECRET_KEY must be set" in refused.stderr
    assert setting("DEBUG", {**embedded, "SECRET_KEY": "s"}) == "False"


def test_the_demo_has_debug_and_its_own_key(tmp_path: Path) -> None:
    demo = {"NEOCLOUD_VAR_DIR": str(tmp_path), "NEOCLOUD_DEMO": "1"}

    assert setting("DEBUG", demo) == "True"
    assert setting("SECRET_KEY", demo).startswith("insecure-demo-key")


@pytest.mark.parametrize(
    ("program", "entry_point"),
    [
        ("manage.py", [sys.executable, "manage.py", "create_organization", "--help"]),
        ("-c", [sys.executable, "-c", "import neocloud.asgi"]),  # as gunicorn's workers load it
        ("-c", [sys.executable, "-c", "import neocloud.wsgi"]),
        ("celery", [str(Path(sys.executable).with_name("celery")), "-A", "neocloud", "worker"]),
    ],
    ids=["manage.py", "asgi", "wsgi", "celery"],
)
def test_a_missing_setting_is_one_line_naming_it(program: str, entry_point: list[str]) -> None:
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    base = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}

    result = subprocess.run(
        entry_point,
        env={**base, "DJANGO_SETTINGS_MODULE": "neocloud.settings", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        f"{program}: SECRET_KEY must be set (only the demo, NEOCLOUD_DEMO=1 as `make demo`"
        " sets, has one)"
    ]


def test_the_demo_refuses_a_production_database() -> None:
    result = manage("check", env={**PRODUCTION, "NEOCLOUD_DEMO": "1"})

    assert result.returncode != 0
    assert "NEOCLOUD_DEMO runs only on the embedded default" in result.stderr


@pytest.mark.smoke
@pytest.mark.parametrize("addrport", ["0.0.0.0:8000", "192.168.1.10:8000", "[::]:8000"])
def test_the_demo_refuses_to_serve_beyond_loopback(  # type: ignore[no-untyped-def]
    addrport: str, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DEMO = True
    monkeypatch.delenv("DEMO_ALLOW_PUBLIC", raising=False)

    with pytest.raises(CommandError, match="DEMO_ALLOW_PUBLIC=1"):
        call_command("demo", addrport)


@pytest.mark.smoke
def test_the_demo_says_what_serving_beyond_loopback_exposes() -> None:
    from neocloud.management.commands.demo import exposure

    assert exposure("127.0.0.1:8000", allow_public=False) is None
    assert exposure("localhost:9000", allow_public=False) is None
    assert exposure("[::1]:8000", allow_public=False) is None
    assert exposure("8000", allow_public=False) is None  # runserver's default address
    warning = exposure("0.0.0.0:8000", allow_public=True)
    assert warning is not None
    assert "admin@neocloud.local / admin" in warning
    assert "demo API key" in warning
    assert "SECRET_KEY" in warning
    assert "DEBUG" in warning


@pytest.mark.smoke
def test_the_demo_command_needs_the_demo_settings(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEMO = False

    with pytest.raises(CommandError, match="NEOCLOUD_DEMO=1"):
        call_command("demo", "127.0.0.1:8000")


def test_session_and_csrf_cookies_are_secure_outside_the_embedded_default(tmp_path: Path) -> None:
    unsaid = {k: v for k, v in PRODUCTION.items() if not k.endswith("_COOKIE_SECURE")}
    assert setting("SESSION_COOKIE_SECURE", unsaid) == "True"
    assert setting("CSRF_COOKIE_SECURE", unsaid) == "True"
    plain_http = {**unsaid, "SESSION_COOKIE_SECURE": "false", "CSRF_COOKIE_SECURE": "false"}
    assert setting("SESSION_COOKIE_SECURE", plain_http) == "False"
    embedded = {"SECRET_KEY": "s", "NEOCLOUD_VAR_DIR": str(tmp_path)}
    assert setting("SESSION_COOKIE_SECURE", embedded) == "False"


def test_e_mail_goes_to_the_console_unless_smtp_is_configured(tmp_path: Path) -> None:
    embedded = {"SECRET_KEY": "s", "NEOCLOUD_VAR_DIR": str(tmp_path)}
    assert setting("EMAIL_BACKEND", embedded) == "django.core.mail.backends.console.EmailBackend"
    smtp = {**PRODUCTION, "EMAIL_HOST": "smtp.example.com"}
    assert setting("EMAIL_BACKEND", smtp) == "django.core.mail.backends.smtp.EmailBackend"


def test_metrics_outside_the_embedded_default_need_a_token_or_named_peers(tmp_path: Path) -> None:
    # Behind a proxy on the same host every client is a loopback peer: none is trusted there.
    assert setting("METRICS_ALLOWED_IPS", PRODUCTION) == "[]"
    named = {**PRODUCTION, "METRICS_ALLOWED_IPS": "10.0.0.9"}
    assert setting("METRICS_ALLOWED_IPS", named) == "['10.0.0.9']"
    embedded = {"SECRET_KEY": "s", "NEOCLOUD_VAR_DIR": str(tmp_path)}
    assert setting("METRICS_ALLOWED_IPS", embedded) == "['127.0.0.1', '::1']"
    assert setting("METRICS_TENANT_LABELS", PRODUCTION) == "False"
