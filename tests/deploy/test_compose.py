"""deploy/compose.yaml and deploy/Dockerfile, read as Docker would read them (Docker does not run on the
development machines): the dashboard and API port is published, by the service whose network namespace
`fedsentry serve` shares, on an address where signing in works with the command's cookie settings; the image
holds every package."""

from __future__ import annotations

from pathlib import Path

import yaml  # PyYAML: installed with the server extra (amqtt) and the dev extra (schemathesis)
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from fedsentry.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _services() -> dict[str, dict]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]


def _serve() -> tuple[str, dict]:
    """The service that runs `fedsentry serve`, and it."""
    (found,) = [(n, s) for n, s in _services().items() if s.get("command", [])[:2] == ["fedsentry", "serve"]]
    return found


def _published(spec: str | dict) -> tuple[str, int, int]:
    """(host address, host port, container port) of a compose port, short ("[IP:]HOST:CONTAINER[/proto]") or
    long syntax."""
    if isinstance(spec, dict):
        return spec.get("host_ip", "0.0.0.0"), int(spec["published"]), int(spec["target"])
    parts = str(spec).split("/")[0].rsplit(":", 2)
    if len(parts) == 1:
        return "0.0.0.0", 0, int(parts[0])  # a random host port
    ip = parts[0] if len(parts) == 3 else "0.0.0.0"
    return ip, int(parts[-2]), int(parts[-1])


def test_the_api_port_is_published_by_the_service_whose_network_namespace_serve_shares():
    name, service = _serve()
    args = build_parser().parse_args(service["command"][1:])  # the command is one `fedsentry` accepts
    assert args.host == "0.0.0.0"  # the container's loopback would be unreachable through a published port
    mode = service.get("network_mode", "")
    owner = mode.removeprefix("service:") if mode.startswith("service:") else name
    if owner != name:
        assert "ports" not in service  # Docker refuses ports on a service that has another's network
    published = [_published(p) for p in _services()[owner].get("ports", [])]
    assert [p for p in published if p[2] == args.port], f"{owner} does not publish port {args.port}: {published}"


def test_signing_in_works_at_the_published_address(tmp_path):
    """With the command's cookie settings, a browser on this host at the published address keeps the session
    cookie (a Secure one over plain http only at a loopback address)."""
    _, service = _serve()
    args = build_parser().parse_args(service["command"][1:])
    owner = service.get("network_mode", "").removeprefix("service:")
    (ip, port, _), = [p for p in map(_published, _services()[owner]["ports"]) if p[2] == args.port]
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=not args.insecure_cookie))
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    origin = f"http://{ip}:{port}"
    client = TestClient(app, base_url=origin)
    assert "cannot work" not in client.get("/login").text
    r = client.post("/login", data={"key": key}, headers={"Origin": origin}, follow_redirects=False)
    assert r.status_code == 303 and "fedsentry_session" in r.headers["set-cookie"]
    assert ip == "127.0.0.1"  # the default: this host only (README, Deployment: the remote case)


def test_the_image_holds_every_package():
    packages = sorted(d.name for d in ROOT.iterdir() if (d / "__init__.py").exists() and d.name != "tests")
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert len(packages) >= 6
    missing = [p for p in packages if f"COPY {p} {p}" not in lines]
    assert not missing, f"deploy/Dockerfile does not copy {missing}: the installed fedsentry would lack them"
