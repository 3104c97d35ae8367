"""The dashboard's login, as a stranger and as a colleague meet it (Flask's test client)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from werkzeug.security import generate_password_hash

from podscope.app.auth import MAX_FAILURES, MAX_FAILURES_ALL, AuthError, AuthSettings, read_users
from podscope.app.cli import cli
from podscope.app.main import create_app
from podscope.app.settings import AppSettings, auth_from_env
from podscope.collectors.errors import CaptureError
from podscope.trace_parsers import layout

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


def test_a_login_opens_every_route_until_logout_ends_it_for_every_copy(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    r = login(c, TOKEN)
    assert r.status_code == 302 and r.headers["Location"] == "/pod"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert c.get("/_dash-layout").status_code == 200 and c.get("/pod").status_code == 200
    assert c.get("/healthz").json["sessions"] == 0
    saved = c.get_cookie("podscope_session")
    assert saved is not None
    assert c.get("/logout").status_code == 302
    assert c.get("/_dash-layout").status_code == 401
    # the cookie saved before the logout (a copy in another browser, or stolen) is dead too
    c.set_cookie("podscope_session", saved.value)
    assert c.get("/_dash-layout").status_code == 401


def test_secure_cookies_behind_tls(tmp_path: Path) -> None:
    r = login(client(tmp_path, token=TOKEN, secure_cookies=True), TOKEN)
    assert "Secure" in r.headers["Set-Cookie"]


@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("//evil.example/x", "/"),
        ("https://evil.example", "/"),
        ("\\\\evil", "/"),
        ("", "/"),
        ("/ops?session=a&q=b", "/ops?session=a&q=b"),
        ("///evil.example/x", "/evil.example/x"),  # a path on this server
        ("/pod#frag", "/pod"),
    ],
)
def test_after_login_only_this_server(tmp_path: Path, target: str, location: str) -> None:
    r = login(client(tmp_path, token=TOKEN), TOKEN, next_path=target)
    assert r.headers["Location"] == location


@pytest.mark.parametrize("target", ["/%09/evil.example", "/%0a/x", "/%7f", "/%0d%0aSet-Cookie:x"])
def test_control_characters_in_next_are_refused(tmp_path: Path, target: str) -> None:
    c = client(tmp_path, token=TOKEN)
    assert c.get(f"/login?next={target}").status_code == 400
    r = c.post(f"/login?next={target}", data={"user": "", "secret": TOKEN})
    assert r.status_code == 400 and "Location" not in r.headers
    assert b"Traceback" not in r.data


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


def test_only_posts_count_as_failed_logins(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    for method in ("HEAD", "GET", "OPTIONS"):
        for _ in range(MAX_FAILURES + 1):
            assert c.open("/login", method=method).status_code in (200, 204)
    assert login(c, TOKEN).status_code == 302


def test_failed_logins_from_many_addresses_meet_a_global_limit(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    guesses = 0
    for i in range(MAX_FAILURES_ALL // (MAX_FAILURES - 1) + 1):  # under the per-address limit
        for _ in range(MAX_FAILURES - 1):
            r = c.post(
                "/login",
                data={"user": "", "secret": "guess"},
                environ_base={"REMOTE_ADDR": f"10.0.{i}.1"},
            )
            guesses += r.status_code == 401
    assert guesses == MAX_FAILURES_ALL
    # the guessing addresses are refused now, even with the right token …
    attacker = {"REMOTE_ADDR": "10.0.0.1"}
    assert c.post("/login", data={"secret": TOKEN}, environ_base=attacker).status_code == 429
    # … and one that has not failed gets in with it: the lockout locks out no one else
    fresh = {"REMOTE_ADDR": "10.9.9.9"}
    assert c.post("/login", data={"secret": TOKEN}, environ_base=fresh).status_code == 302


def test_concurrent_guesses_from_one_address_are_counted_before_they_are_checked(
    tmp_path: Path,
) -> None:
    """16 clients of one address at once: each attempt counts from its start, so no more than
    ``MAX_FAILURES`` are checked (57 were, when each was counted after its check)."""
    import threading

    settings = AppSettings(logdir=tmp_path / "logdir", auth=AuthSettings(token=TOKEN))
    settings.logdir.mkdir()
    app = create_app(settings)
    codes: list[int] = []
    start = threading.Barrier(16)

    def guess() -> None:
        c = app.server.test_client()
        start.wait()
        for _ in range(4):
            codes.append(c.post("/login", data={"secret": "guess"}).status_code)

    threads = [threading.Thread(target=guess) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes.count(401) <= MAX_FAILURES and codes.count(429) == len(codes) - codes.count(401)


def test_a_huge_login_body_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    r = c.post("/login", data={"secret": "x" * (2 << 20)})
    assert r.status_code == 413
    assert login(c, TOKEN).status_code == 302  # still a login page for everyone


def test_the_failed_logins_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import podscope.app.auth as auth_module

    monkeypatch.setattr(auth_module, "MAX_PEERS", 100)
    failures = auth_module._Failures()
    for i in range(1000):
        peer = f"10.1.{i // 256}.{i % 256}"
        assert failures.begin(peer) is None
        failures.failed(peer)
    assert len(failures._times) <= 100


def test_users_with_hashed_passwords(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"# team\nada:{generate_password_hash('correct horse')}\n")
    names, capture = read_users(users)
    c = client(tmp_path, users=names, capture_users=capture)
    assert login(c, "correct horse", user="bob").status_code == 401
    assert login(c, TOKEN, user="ada").status_code == 401
    assert login(c, "correct horse", user="ada").status_code == 302
    assert c.get("/_dash-layout").status_code == 200


PROXY = {"proxy_header": "X-Forwarded-User", "trusted_proxies": ("10.1.1.1", "10.2.0.0/16")}


def test_a_proxy_header_is_trusted_only_from_the_named_proxies(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match="PODSCOPE_TRUSTED_PROXIES"):
        AuthSettings(proxy_header="X-Forwarded-User")
    with pytest.raises(AuthError, match="PODSCOPE_TRUSTED_PROXIES"):
        AuthSettings(proxy_header="X-Forwarded-User", trusted_proxies=("not-an-address",))
    c = client(tmp_path, **PROXY)
    user = {"X-Forwarded-User": "ada"}
    assert c.get("/_dash-layout", headers=user).status_code == 401  # straight from 127.0.0.1
    for proxy in ("10.1.1.1", "10.2.3.4"):
        r = c.get("/_dash-layout", headers=user, environ_base={"REMOTE_ADDR": proxy})
        assert r.status_code == 200
    # the bypass of the attack run: a token login configured too, the header from a client
    c = client(tmp_path, token=TOKEN, **PROXY)
    assert c.get("/_dash-layout", headers={"X-Forwarded-User": "mallory"}).status_code == 401
    r = c.post("/_dash-update-component", json={}, headers={"X-Forwarded-User": "mallory"})
    assert r.status_code == 401


def test_serve_refuses_a_proxy_header_without_its_proxies(tmp_path: Path) -> None:
    env = {"PODSCOPE_TRUST_PROXY_HEADER": "X-Forwarded-User", "PODSCOPE_DASHBOARD_TOKEN": TOKEN}
    r = CliRunner().invoke(cli, ["serve", "--logdir", str(tmp_path), "--host", "0.0.0.0"], env=env)
    assert r.exit_code == 2 and "PODSCOPE_TRUSTED_PROXIES" in r.output


def test_a_short_token_is_refused_for_a_public_bind(tmp_path: Path) -> None:
    env = {"PODSCOPE_DASHBOARD_TOKEN": "x"}
    r = CliRunner().invoke(cli, ["serve", "--logdir", str(tmp_path), "--host", "0.0.0.0"], env=env)
    assert r.exit_code == 2 and "1 characters" in r.output and "at least 16" in r.output


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost:8050", True),
        ("127.0.0.1:8050", True),
        ("[::1]:8050", True),
        ("LOCALHOST", True),
        ("evil.example:8050", False),  # DNS rebinding: the page's own name
        ("localhost@evil.example", False),
        ("127.0.0.1:99999", False),
        ("", False),
    ],
)
def test_only_the_names_the_server_answers_to(tmp_path: Path, host: str, ok: bool) -> None:
    c = client(tmp_path)  # a loopback dashboard without a login
    r = c.get("/_dash-layout", headers={"Host": host})
    assert (r.status_code == 200) == ok
    if not ok:
        assert r.status_code == 400 and b"PODSCOPE_ALLOWED_HOSTS" in r.data


def test_allowed_hosts_add_names_and_subdomains(tmp_path: Path) -> None:
    from podscope.app.hosts import answered_names, answers, host_name

    names = answered_names("127.0.0.1", ("podscope.example", ".corp.example"))
    assert answers(host_name("podscope.example:443"), names)
    assert answers(host_name("a.b.corp.example"), names)
    assert not answers(host_name("corp.example.evil"), names)
    assert not answers(host_name("xpodscope.example"), names)


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


@pytest.mark.parametrize(("flag", "role"), [([], "view"), (["--capture"], "capture")])
def test_hash_password_prints_a_users_file_line(tmp_path: Path, flag: list[str], role: str) -> None:
    r = CliRunner().invoke(
        cli, ["hash-password", "ada", *flag], input="correct horse\ncorrect horse\n"
    )
    assert r.exit_code == 0, r.output
    (tmp_path / "users").write_text(r.output.strip().splitlines()[-1] + "\n")
    users, capture = read_users(tmp_path / "users")
    auth = AuthSettings(users=users, capture_users=capture)
    assert auth.check("ada", "correct horse") == ("ada", role)


def test_capture_page_reads_manifests_only_where_it_may(tmp_path: Path) -> None:
    from podscope.app.context import MAX_MANIFEST_BYTES, AppContext

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


def run_capture_page(app, addresses: str | None, manifest: str | None = None):  # type: ignore[no-untyped-def]
    """The Capture page's job for ``addresses`` (or a cluster ``manifest``), as Dash runs it
    (in the app's context)."""
    run_capture = sys.modules["pages.capture"].run_capture
    with app.server.test_request_context():
        return run_capture(lambda _: None, 1, addresses, manifest, 200, 100, "2", "0", 0, "x", "")


class Trap:
    """A gRPC server that records the metadata of every call it gets (and answers none)."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc

        self.metadata: list[dict[str, str]] = []
        trap = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):  # type: ignore[no-untyped-def]
                trap.metadata.append(dict(details.invocation_metadata))
                return None

        self.server = grpc.server(futures.ThreadPoolExecutor(2), handlers=[Handler()])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()


def test_the_agents_token_goes_only_to_the_agents_the_operator_named(tmp_path: Path) -> None:
    """A logged-in user types an address on the Capture page: a server there would receive
    the agents' token. Behind a login, the dashboard calls only the served cluster's workers
    and PODSCOPE_AGENT_ALLOW's patterns."""
    trap = Trap()
    try:
        address = f"127.0.0.1:{trap.port}"
        auth = AuthSettings(token=TOKEN)
        settings = AppSettings(logdir=tmp_path / "logdir", agent_token="agents-secret", auth=auth)
        alert = run_capture_page(create_app(settings), address)
        assert "not an agent this dashboard may call" in str(alert) and not trap.metadata
        allowed = AppSettings(
            logdir=tmp_path / "logdir",
            agent_token="agents-secret",
            auth=auth,
            agent_allow=("127.0.0.1:*",),
        )
        run_capture_page(create_app(allowed), address)
        assert trap.metadata and trap.metadata[0]["x-podscope-token"] == "agents-secret"
    finally:
        trap.server.stop(0)


def test_a_manifest_under_the_logdir_sends_the_token_only_where_allowed(tmp_path: Path) -> None:
    """A viewer's upload can put a ``cluster.json`` under the logdir; a capture user who picks
    it must not send the agents' token to the address it names: its workers pass the same
    check as typed addresses."""
    from podscope.reference_engine import cluster

    trap = Trap()
    try:
        run_dir = tmp_path / "logdir" / "uploaded"
        run_dir.mkdir(parents=True)
        task = cluster.TaskInfo(
            "worker", 0, 1, "127.0.0.1:1", f"127.0.0.1:{trap.port}", str(run_dir / "log")
        )
        cluster.Manifest(str(run_dir), "mwms-loop", "baseline", (task,), 0.0).save()
        auth = AuthSettings(token=TOKEN)
        settings = AppSettings(logdir=tmp_path / "logdir", agent_token="agents-secret", auth=auth)
        alert = run_capture_page(create_app(settings), None, str(run_dir))
        assert "not an agent this dashboard may call" in str(alert) and not trap.metadata
    finally:
        trap.server.stop(0)


@pytest.mark.parametrize(
    ("address", "pattern", "admitted"),
    [
        ("10.0.1.7:6010", "10.0.1.*:6010", True),
        ("10.0.1.attacker.example:6010", "10.0.1.*:6010", False),  # * never crosses a dot
        ("10.0.1.7:6011", "10.0.1.*:6010", False),
        ("10.0.1.7:6011", "10.0.1.*:*", True),
        ("10.0.1.7:6010", "10.0.1.0/24:6010", True),
        ("10.0.2.7:6010", "10.0.1.0/24:6010", False),
        ("10.0.1.example:6010", "10.0.1.0/24:6010", False),  # a name never matches a network
        ("[fd00::5]:6010", "[fd00::/64]:6010", True),
        ("[fd01::5]:6010", "[fd00::/64]:6010", False),
        ("worker-3.train.internal:6010", "worker-*.train.internal:6010", True),
        ("worker-3.evil.train.internal:6010", "worker-*.train.internal:6010", False),
        ("Worker-3.Train.Internal:6010", "worker-*.train.internal:6010", True),
        ("10.0.1.7:6010", "*:6010", False),  # one label, not four
    ],
)
def test_allow_patterns_match_label_by_label_and_networks_as_cidr(
    address: str, pattern: str, admitted: bool
) -> None:
    from podscope.app.targets import address_matches

    assert address_matches(address, pattern) is admitted


def ada_views_bob_captures(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A dashboard whose users file has ada (views) and bob (captures)."""
    users = tmp_path / "users"
    users.write_text(
        f"ada:{generate_password_hash('ada password')}\n"
        f"bob:capture:{generate_password_hash('bob password')}\n"
    )
    names, capture = read_users(users)
    return client(tmp_path, users=names, capture_users=capture)


def test_viewers_cannot_capture(tmp_path: Path) -> None:
    c = ada_views_bob_captures(tmp_path)
    body = {"output": "cap-result.children", "outputs": {}, "inputs": [], "changedPropIds": []}
    page = sys.modules["pages.capture"]

    def capture_page() -> str:
        with c:  # the page as the logged-in user's request renders it
            assert c.get("/capture").status_code == 200
            return str(page.layout())

    assert login(c, "ada password", user="ada").status_code == 302
    shown = capture_page()
    assert "(ada) may view sessions, not capture" in shown and "disabled=True" in shown
    assert c.post("/_dash-update-component", json=body).status_code == 403
    assert c.get("/logout").status_code == 302
    assert login(c, "bob password", user="bob").status_code == 302
    shown = capture_page()
    assert "may view sessions" not in shown and "disabled=False" in shown
    assert c.post("/_dash-update-component", json=body).status_code != 403


def test_viewers_cannot_rewrite_a_sessions_label_or_note(tmp_path: Path) -> None:
    """A label and a note change what everyone reads of a session: the capture role only.
    The server refuses a viewer's save (403) whatever a browser sends, and the page keeps the
    viewer's Save button off."""
    from podscope.app import ids

    c = ada_views_bob_captures(tmp_path)
    output = f"..{ids.SES_SAVED}.children...{ids.SESSIONS_TABLE}.rowData@x.."
    body = {"output": output, "outputs": [], "inputs": [], "changedPropIds": []}
    pick = sys.modules["pages.sessions"].pick
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    layout.write_manifest(session, "s1", 1, {}, [])
    (session / "w.xplane.pb").write_bytes(b"")  # a capture file: a session to pick
    assert login(c, "ada password", user="ada").status_code == 302
    assert c.post("/_dash-update-component", json=body).status_code == 403
    with c:
        c.get("/")
        assert pick("s1")[2] is True  # Save stays off for a viewer
    assert c.get("/logout").status_code == 302
    assert login(c, "bob password", user="bob").status_code == 302
    assert c.post("/_dash-update-component", json=body).status_code != 403
    with c:
        c.get("/")
        assert pick("s1")[2] is False


@pytest.mark.parametrize(
    "body",
    [
        {"output": "no-such-component.children", "outputs": {}, "inputs": []},
        {"output": 7},
        [],
        "not json",
    ],
    ids=["unknown output", "not a string", "a list", "not JSON"],
)
def test_a_callback_request_naming_no_callback_is_400_not_500(tmp_path: Path, body: object) -> None:
    c = client(tmp_path)  # loopback, no login: the request reaches Dash
    if isinstance(body, str):
        r = c.post("/_dash-update-component", data=body, content_type="application/json")
    else:
        r = c.post("/_dash-update-component", json=body)
    assert r.status_code == 400 and r.get_json() == {"error": "no such callback"}


def test_a_users_file_password_shorter_than_eight_characters_never_logs_in(
    tmp_path: Path,
) -> None:
    """A hand-written users file may hold the hash of "1": that login is refused like a wrong
    one (``podscope hash-password`` makes no such hash)."""
    users = tmp_path / "users"
    users.write_text(
        f"weak:capture:{generate_password_hash('1')}\n"
        f"ok:capture:{generate_password_hash('long enough')}\n"
    )
    names, capture = read_users(users)
    c = client(tmp_path, users=names, capture_users=capture)
    assert login(c, "1", user="weak").status_code != 302
    assert c.get("/pod").status_code == 302  # still sent to the login page
    assert login(c, "long enough", user="ok").status_code == 302
    assert c.get("/pod").status_code == 200
