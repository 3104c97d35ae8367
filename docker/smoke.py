"""Run inside a PodScope container (``docker exec -i C python - < docker/smoke.py TOKEN``):
logs in, opens every page and its layout, uploads a trace through the Sessions page's
callback, and checks that the session landed in /data. Exits non-zero on the first failure."""

from __future__ import annotations

import base64
import http.cookiejar
import json
import sys
import urllib.parse
import urllib.request

BASE = "http://127.0.0.1:8050"
PAGES = [
    "/",
    "/pod",
    "/ops",
    "/timeline",
    "/workers",
    "/diagnostics",
    "/compare",
    "/android",
    "/capture",
]


def main(token: str) -> None:
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )

    def get(path: str) -> bytes:
        with opener.open(BASE + path, timeout=30) as r:
            assert r.status == 200, (path, r.status)
            return bytes(r.read())

    assert json.loads(get("/healthz")) == {"status": "ok"}  # strangers learn nothing more
    try:  # a stranger gets 401 from the API
        opener.open(BASE + "/_dash-layout", timeout=10)
        raise SystemExit("/_dash-layout answered without a login")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code
    form = urllib.parse.urlencode({"user": "", "secret": token, "next": "/"}).encode()
    opener.open(BASE + "/login", data=form, timeout=30).read()
    health = json.loads(get("/healthz"))
    for path in [*PAGES, "/_dash-layout", "/_dash-dependencies"]:
        get(path)
    deps = json.loads(get("/_dash-dependencies"))
    upload = next(d for d in deps if any(i["id"] == "sessions-upload" for i in d["inputs"]))
    trace = b"# tracer: nop\n  infer-2000 [001] ...1 0.000100: tracing_mark_write: B|2000|invoke@-1/0\n  infer-2000 [001] ...1 0.000400: tracing_mark_write: E|2000\n"
    body = {
        "output": upload["output"],
        "outputs": [
            {"id": o.split(".")[0], "property": o.split(".")[1]}
            for o in upload["output"].strip(".").split("...")
        ],
        "inputs": [
            {
                "id": "sessions-upload",
                "property": "contents",
                "value": [
                    "data:application/octet-stream;base64," + base64.b64encode(trace).decode()
                ],
            }
        ],
        "state": [{"id": "sessions-upload", "property": "filename", "value": ["phone.systrace"]}],
        "changedPropIds": ["sessions-upload.contents"],
    }
    request = urllib.request.Request(
        BASE + "/_dash-update-component",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with opener.open(request, timeout=60) as r:
        answer = r.read().decode()
    assert "worker(s)" in answer, answer[:2000]
    after = json.loads(get("/healthz"))
    assert after["sessions"] == health["sessions"] + 1, (health, after)
    print(
        f"smoke ok: {len(PAGES)} pages, upload -> {after['sessions']} session(s) in {after['logdir']}"
    )


if __name__ == "__main__":
    main(sys.argv[1])
