"""docker-compose.yml and Dockerfile stay in step with the CLI (services.cli) and the settings (services.config).

No Docker engine is needed: the files are parsed and checked against the code they start, so renaming a
`fabricplan` subcommand or option, or a Settings field, fails here rather than in a deployment.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from services.cli import build_parser
from services.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
APP_SERVICES = ("migrate", "api", "worker")
EXPECTED_COMMANDS = {"migrate": "migrate", "api": "serve", "worker": "worker"}
ENV_PREFIX = Settings.model_config["env_prefix"]


ENV_EXAMPLE = ROOT / ".env.example"


def env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def interpolate(text: str, env: dict[str, str]) -> str:
    """docker compose's variable interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}; $$ is a literal $."""
    def sub(m):
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg
        raise AssertionError(f"docker-compose.yml needs {name} ({arg or 'no default'}), and .env.example lacks it")
    text = re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", sub, text.replace("$$", "\0"))
    return text.replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict:
    """docker-compose.yml as compose runs it with the variables of .env.example."""
    return yaml.safe_load(interpolate(COMPOSE.read_text(), env_file(ENV_EXAMPLE)))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("services.cli.build_parser() has no subcommands")


def argv_of(command) -> list[str]:
    return list(command) if isinstance(command, list) else shlex.split(command)


def parse_fabricplan(argv: list[str], where: str) -> argparse.Namespace:
    """The command must be `fabricplan <subcommand> ...` and parse with the real CLI parser."""
    assert argv and argv[0] == "fabricplan", f"{where}: {argv!r} does not run the fabricplan command"
    names = subcommands()
    assert len(argv) > 1 and argv[1] in names, (
        f"{where}: `fabricplan {argv[1] if len(argv) > 1 else ''}` is not a subcommand; "
        f"services.cli has {sorted(names)}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is rejected by services.cli: {err.getvalue().strip()}")


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def depends_on(service: dict) -> dict[str, str]:
    dep = service.get("depends_on") or {}
    if isinstance(dep, list):                           # short form means "service_started"
        return {name: "service_started" for name in dep}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in dep.items()}


def healthcheck_text(service: dict) -> str:
    test = (service.get("healthcheck") or {}).get("test")
    assert test, "no healthcheck test"
    return " ".join(test) if isinstance(test, list) else str(test)


def build_context(service: dict) -> str | None:
    build = service.get("build")
    if isinstance(build, dict):
        return build.get("context", ".")
    return build


def api_container_port(services) -> int:
    ports = services["api"]["ports"]
    assert ports, "the api publishes no port"
    mapping = ports[0]
    if isinstance(mapping, dict):
        return int(mapping["target"])
    return int(str(mapping).split(":")[-1].split("/")[0])


# ----- Dockerfile ----------------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def dockerfile_cmd() -> list[str]:
    cmds = [rest for kw, rest in dockerfile_instructions() if kw == "CMD"]
    assert cmds, "the Dockerfile has no CMD"
    cmd = cmds[-1]
    return json.loads(cmd) if cmd.startswith("[") else shlex.split(cmd)


# ----- services, images, commands ------------------------------------------------------------------------
def test_the_five_services_exist(services):
    assert {"postgres", "redis", "migrate", "api", "worker"} <= services.keys()


def test_images_and_builds(services):
    assert str(services["postgres"]["image"]).split(":")[0] == "postgres"
    assert str(services["postgres"]["image"]).split(":")[1].startswith("16")
    assert str(services["redis"]["image"]).split(":")[0] == "redis"
    assert str(services["redis"]["image"]).split(":")[1].startswith("7")
    images = [str(svc["image"]) for svc in services.values() if "image" in svc]
    images += [rest.split()[0] for kw, rest in dockerfile_instructions() if kw == "FROM" and ":" in rest.split()[0]]
    for image in images:             # exact versions: a major tag or `latest` moves under a deployment
        assert re.search(r":\d+\.\d+(\.\d+)?(-[a-z0-9.-]+)?(@sha256:[0-9a-f]{64})?$", image), image
    for name in APP_SERVICES:
        assert build_context(services[name]) in (".", "./"), f"{name} must be built from the repository's Dockerfile"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_commands_are_real_fabricplan_subcommands(services, name):
    argv = argv_of(services[name]["command"])
    parse_fabricplan(argv, f"docker-compose.yml services.{name}.command")
    assert argv[1] == EXPECTED_COMMANDS[name]


def test_every_command_in_compose_is_a_fabricplan_subcommand(services):
    ours = [name for name, svc in services.items() if "command" in svc and build_context(svc) is not None]
    assert set(EXPECTED_COMMANDS) <= set(ours), ours
    for name in ours:
        parse_fabricplan(argv_of(services[name]["command"]), f"docker-compose.yml services.{name}.command")


def test_api_serves_on_all_interfaces_at_the_published_port(services):
    args = parse_fabricplan(argv_of(services["api"]["command"]), "api")
    assert args.host == "0.0.0.0"
    assert args.port == api_container_port(services), "serve --port must be the container port the api publishes"


def test_worker_runs_several_processes(services):
    args = parse_fabricplan(argv_of(services["worker"]["command"]), "worker")
    assert args.concurrency >= 1
    replicas = (services["worker"].get("deploy") or {}).get("replicas")
    assert isinstance(replicas, int) and replicas >= 2, "the worker needs a replica count (deploy.replicas)"


def test_migrate_runs_once(services):
    assert services["migrate"].get("restart") == "no", 'migrate is a one-shot job: restart: "no" (quoted)'


# ----- environment vs. Settings --------------------------------------------------------------------------
def test_every_fabricplan_variable_is_a_setting(services):
    fields = set(Settings.model_fields)
    used = set(re.findall(rf"\b{ENV_PREFIX}[A-Z0-9_]+", COMPOSE.read_text()))
    for svc in services.values():
        used |= {k for k in environment(svc) if k.upper().startswith(ENV_PREFIX)}
    assert used, "docker-compose.yml sets no FABRICPLAN_* variable"
    unknown = sorted(v for v in used if v[len(ENV_PREFIX):].lower() not in fields)
    assert not unknown, f"{unknown} are not fields of services.config.Settings ({sorted(fields)})"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_point_at_postgres_and_redis(services, name, monkeypatch):
    env = environment(services[name])
    for key in ("FABRICPLAN_DATABASE_URL", "FABRICPLAN_BROKER_URL", "FABRICPLAN_RESULT_BACKEND"):
        assert key in env, f"{name} lacks {key}"
    # The values go through Settings exactly as the container would read them.
    for key in [k for k in os.environ if k.upper().startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    st = Settings()
    assert not st.embedded, f"{name} would run the embedded (in-process) worker"

    pg = services["postgres"]["environment"]
    url = make_url(st.sqlalchemy_url)
    assert url.drivername == "postgresql+psycopg", "SQLAlchemy needs the psycopg (v3) driver"
    assert url.host == "postgres" and (url.port or 5432) == 5432
    assert url.database == pg["POSTGRES_DB"]
    assert url.username == pg["POSTGRES_USER"] and url.password == pg["POSTGRES_PASSWORD"]

    for value in (st.broker_url, st.backend_url):
        parts = urlsplit(value)
        assert parts.scheme == "redis" and parts.hostname == "redis" and (parts.port or 6379) == 6379


def test_postgres_database_is_named(services):
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "fabricplan"


# ----- health and ordering --------------------------------------------------------------------------------
def test_healthchecks(services):
    assert "pg_isready" in healthcheck_text(services["postgres"])
    redis = healthcheck_text(services["redis"])
    assert "redis-cli" in redis and "ping" in redis
    api = healthcheck_text(services["api"])
    assert f":{api_container_port(services)}/readyz" in api
    assert "curl" not in api and "wget" not in api, "python:3.11-slim has neither curl nor wget"


def test_health_paths_exist_in_the_app():
    from services.api.app import create_app

    paths = create_app(Settings.model_construct()).openapi()["paths"]
    assert {"/readyz", "/healthz"} <= paths.keys()


def test_depends_on_conditions(services):
    assert depends_on(services["migrate"]).get("postgres") == "service_healthy"
    for name in ("api", "worker"):
        dep = depends_on(services[name])
        assert dep.get("migrate") == "service_completed_successfully", f"{name} must wait for the migration"
        assert dep.get("redis") == "service_healthy", f"{name} must wait for a healthy redis"
        assert dep.get("postgres", "service_healthy") == "service_healthy"


def test_named_volumes(compose, services):
    declared = set((compose.get("volumes") or {}).keys())
    for name in ("postgres", "redis"):
        for vol in services[name].get("volumes", []):
            source = vol["source"] if isinstance(vol, dict) else str(vol).split(":")[0]
            assert source in declared, f"{name} mounts {source}, which is not a named volume"
    assert any(str(v).endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


# ----- Dockerfile ----------------------------------------------------------------------------------------
def test_dockerfile_base_install_and_user():
    ins = dockerfile_instructions()
    froms = [rest for kw, rest in ins if kw == "FROM"]
    assert len(froms) >= 2 and all(f.startswith("python:3.11.") for f in froms), "multi-stage, Python 3.11"
    assert any(kw == "RUN" and re.search(r"\bpip install\b.*\s\.(\s|$)", rest + " ") for kw, rest in ins)
    users = [rest for kw, rest in ins if kw == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the image must not run as root"


def test_dockerfile_cmd_is_a_subcommand_and_exposes_the_api_port(services):
    argv = dockerfile_cmd()
    args = parse_fabricplan(argv, "Dockerfile CMD")
    assert argv[1] == "serve" and args.host == "0.0.0.0"
    exposed = {int(p.split("/")[0]) for kw, rest in dockerfile_instructions() if kw == "EXPOSE" for p in rest.split()}
    assert api_container_port(services) in exposed, "the Dockerfile must EXPOSE the port the api publishes"
    assert args.port in exposed


# ----- security and the dependency layer ------------------------------------------------------------------
def test_keys_are_required_and_a_bootstrap_key_is_handed_over(services):
    for name in APP_SERVICES:
        assert environment(services[name]).get("FABRICPLAN_API_KEYS_REQUIRED") == "true", name
    args = parse_fabricplan(argv_of(services["migrate"]["command"]), "migrate")
    key_dir = str(Path(args.bootstrap_key).parent)
    mounts = {name: [str(v) for v in services[name].get("volumes", [])] for name in ("migrate", "api")}
    assert any(v.split(":")[1] == key_dir for v in mounts["migrate"]), "the key file must be on a volume"
    assert any(v.split(":")[1] == key_dir and v.endswith(":ro") for v in mounts["api"]), "readable from the api"
    assert "chmod 0700 /run/fabricplan/keys" in DOCKERFILE.read_text()


def test_secrets_come_from_the_env_file():
    raw = COMPOSE.read_text()
    example = env_file(ENV_EXAMPLE)
    for var in ("POSTGRES_PASSWORD", "REDIS_PASSWORD"):
        assert f"${{{var}:?" in raw and var in example, var
        assert example[var] not in raw, f"{var}'s value is written into docker-compose.yml"
    assert not re.search(r"POSTGRES_PASSWORD:\s*[A-Za-z0-9]", raw), "a literal database password"
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_api_is_published_on_loopback_by_default(services):
    ports = [str(p) for p in services["api"]["ports"]]
    assert ports == ["127.0.0.1:8000:8000"], ports


def test_worker_healthcheck_pings_its_own_node(services):
    check = healthcheck_text(services["worker"])
    assert "inspect ping" in check and "celery@$HOSTNAME" in check, check
    args = parse_fabricplan(argv_of(services["worker"]["command"]), "worker")
    assert args.hostname is None, "the check assumes the default node name celery@<hostname>"
    from workers.app import celery_app

    assert celery_app.main == "fabricplan"


def test_dependencies_install_from_the_lock_before_the_code():
    ins = dockerfile_instructions()
    copies = [(i, rest) for i, (kw, rest) in enumerate(ins) if kw == "COPY"]
    lock = next(i for i, rest in copies if "requirements.lock" in rest)
    code = next(i for i, rest in copies if rest.startswith("services"))
    install = next(i for i, (kw, rest) in enumerate(ins) if kw == "RUN" and "--require-hashes -r" in rest)
    assert lock < install < code, "the locked dependencies are a layer below the code"
    assert any(kw == "RUN" and "pip install --no-deps ." in rest for kw, rest in ins)
