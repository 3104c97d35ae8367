"""The dashboard's login, as a stranger and as a colleague meet it (Flask's test client)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from werkzeug.security import generate_password_hash

from app.auth import MAX_FAILURES, AuthError, AuthSettings, read_users
from app.cli import cli
from app.main import create_app
from app.settings import AppSettings, auth_from_env
from collectors.errors import CaptureError

TOKEN = "team-token-123"
DASH_POST = ("/_dash-update-component", "/_dash-upload")


def client(tmp_path: Path, **auth: object):  # type: ignore[no-untyped-def]
    settings = AppSettings(logdir=tmp_path / "logdir", auth=AuthSettings(**auth))  # type: ignore[arg-type]
    settings.logdir.mkdir(exist_ok=True)
    return create_app(settings).server.test_client()


def login(c, secret: str, user: str = "", next_path: str = "/pod"):  # type: ignore[no-untyped-def]
    return c.post("/login", data={"user": user, "secret": secret, "next": next_path})


def test_strangers_get_the_login_page_and_401s(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="podscope.dashboard")
    c = client(tmp_path, token=TOKEN)
    r = c.get("/ops?session=s1")
    assert r.status_code == 302 and r.headers["Location"] == "/login?next=/ops%3Fsession%3Ds1"
    assert c.get("/login").status_code == 200 and b'name="secret"' in c.get("/login").data
    assert c.get("/_dash-layout").status_code == 401
    assert c.get("/_dash-dependencies").status_code == 401
    for path in DASH_POST:
        assert c.post(path, json={}).status_code == 401
    assert c.get("/healthz").json == {"status": "ok"}  # no paths or counts for strangers
    refusals = [r.getMessage() for r in caplog.records]
    assert len(refusals) == 5 and all("from 127.0.0.1: not logged in" in m for m in refusals)


def test_a_login_opens_every_route_until_logout(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    r = login(c, TOKEN)
    assert r.status_code == 302 and r.headers["Location"] == "/pod"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert c.get("/_dash-layout").status_code == 200 and c.get("/pod").status_code == 200
    assert c.get("/healthz").json["sessions"] == 0
    assert c.get("/logout").status_code == 302
    assert c.get("/_dash-layout").status_code == 401


def test_secure_cookies_behind_tls(tmp_path: Path) -> None:
    r = login(client(tmp_path, token=TOKEN, secure_cookies=True), TOKEN)
    assert "Secure" in r.headers["Set-Cookie"]


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example", "\\\\evil", ""])
def test_after_login_only_this_server(tmp_path: Path, target: str) -> None:
    r = login(client(tmp_path, token=TOKEN), TOKEN, next_path=target)
    assert r.headers["Location"] == "/"


def test_failed_logins_are_logged_and_throttled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="podscope.dashboard")
    c = client(tmp_path, token=TOKEN)
    for _ in range(MAX_FAILURES):
        assert login(c, "guess").status_code == 401
    assert login(c, TOKEN).status_code == 429  # even the right token, for the window
    assert c.get("/_dash-layout").status_code == 401
    assert sum("failed login from 127.0.0.1" in r.getMessage() for r in caplog.records) == 5


def test_users_with_hashed_passwords(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"# team\nada:{generate_password_hash('correct horse')}\n")
    c = client(tmp_path, users=read_users(users))
    assert login(c, "correct horse", user="bob").status_code == 401
    assert login(c, TOKEN, user="ada").status_code == 401
    assert login(c, "correct horse", user="ada").status_code == 302
    assert c.get("/_dash-layout").status_code == 200


def test_trusted_proxy_header(tmp_path: Path) -> None:
    c = client(tmp_path, proxy_header="X-Forwarded-User")
    assert c.get("/_dash-layout").status_code == 401
    assert c.get("/_dash-layout", headers={"X-Forwarded-User": "ada"}).status_code == 200


def test_credentials_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    auth = auth_from_env({"PODSCOPE_DASHBOARD_TOKEN_FILE": str(tmp_path / "token")})
    assert auth.token == TOKEN and auth.enabled
    assert not auth_from_env({}).enabled
    (tmp_path / "users").write_text("ada:plaintext\n")
    with pytest.raises(AuthError, match="name:hash"):
        auth_from_env({"PODSCOPE_USERS_FILE": str(tmp_path / "users")})
    with pytest.raises(AuthError, match="cannot read"):
        auth_from_env({"PODSCOPE_DASHBOARD_TOKEN_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize("how", [["--host", "0.0.0.0"], []])
def test_serve_refuses_other_machines_without_a_login(tmp_path: Path, how: list[str]) -> None:
    env = {"PODSCOPE_HOST": "0.0.0.0", "PODSCOPE_DASHBOARD_TOKEN": ""}
    r = CliRunner().invoke(cli, ["serve", "--logdir", str(tmp_path), *how], env=env)
    assert r.exit_code == 2, r.output
    assert "PODSCOPE_DASHBOARD_TOKEN" in r.output and "127.0.0.1" in r.output


def test_hash_password_prints_a_users_file_line() -> None:
    r = CliRunner().invoke(cli, ["hash-password", "ada"], input="correct horse\ncorrect horse\n")
    assert r.exit_code == 0, r.output
    line = r.output.strip().splitlines()[-1]
    users = dict([line.split(":", 1)])
    assert AuthSettings(users=users).check("ada", "correct horse") == "ada"


def test_capture_page_reads_manifests_only_where_it_may(tmp_path: Path) -> None:
    from app.context import MAX_MANIFEST_BYTES, AppContext

    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    good = logdir / "run" / "cluster.json"
    good.write_text('{"tasks": []}')
    context = AppContext.build(AppSettings(logdir=logdir))
    assert context.allowed_manifest(str(logdir / "run")) == good.resolve()
    for bad, why in (
        ("/dev/zero", "only under"),
        (str(tmp_path / "elsewhere.json"), "only under"),
        (str(logdir / "run" / ".." / ".." / "x.json"), "only under"),
        (str(logdir / "missing.json"), "no cluster manifest"),
    ):
        with pytest.raises(CaptureError, match=why):
            context.allowed_manifest(bad)
    (logdir / "big.json").write_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(CaptureError, match="bytes"):
        context.allowed_manifest(str(logdir / "big.json"))
    (logdir / "dev").symlink_to("/dev/zero")
    with pytest.raises(CaptureError):
        context.allowed_manifest(str(logdir / "dev"))


def test_capture_page_sends_the_agents_token(tmp_path: Path) -> None:
    from tests.collectors.fake_agent import fake_agent

    settings = AppSettings(logdir=tmp_path / "logdir", agent_token=TOKEN)
    app = create_app(settings)
    # The page module as Dash loaded it: importing app.pages.capture would register it twice.
    run_capture = sys.modules["pages.capture"].run_capture
    with (
        fake_agent(tmp_path / "agent", token=TOKEN) as (address, traced),
        app.server.test_request_context(),
    ):
        alert = run_capture(lambda _: None, 1, address, None, 200, 100, "2", "0", 0, "x", "")
    assert len(traced) == 1 and "1 of 1 worker captured" in str(alert)
