"""A real JupyterHub for the tests: system users, configurable-http-proxy, the hub process, and its REST API.

``HubRun`` owns everything it makes in one world-searchable temp directory (the users' Python mirror,
their homes, the hub's private state) and its ``close()`` ends every process it started or that runs
as one of its users, deletes the users, removes the directory, and returns what it had to kill.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests
from held_port import HeldPort

from .user_python import UserPython, build_user_python

PROXY_VERSION = "4.6.3"
PASSWORD_LENGTH = 16
LAB_QUIET = {"fetchNews": "false", "checkForUpdates": False}  # no news or update checks behind the hub


# what an admin writes to give users their own environment, e.g. their GPUs (docs/jupyterhub.md)
PER_USER_HOOK = """
PER_USER = {per_user!r}


def per_user_environment(spawner):
    env = dict(spawner.environment)
    for key, value in PER_USER.get(spawner.user.name, {{}}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    spawner.environment = env

"""


USER_NAME = re.compile(r"^mgpu-[a-z]-[0-9a-f]{6}$")  # what add_user names users; the root is /tmp/mh…


def remove_leftover_users() -> list[str]:
    """Delete users an earlier run made and could not delete (it was killed): our names, homes gone, idle."""
    removed = []
    busy = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info["uids"]}
    for entry in pwd.getpwall():
        if (
            USER_NAME.match(entry.pw_name)
            and entry.pw_dir.startswith("/tmp/mh")
            and not os.path.exists(entry.pw_dir)
            and entry.pw_uid not in busy
        ):
            subprocess.run(["userdel", entry.pw_name], capture_output=True, timeout=30, check=False)
            removed.append(entry.pw_name)
    return removed


def can_make_users() -> bool:
    """Separate system users (LocalProcessSpawner) need root and useradd; else SimpleLocalProcessSpawner."""
    return os.geteuid() == 0 and shutil.which("useradd") is not None and shutil.which("userdel") is not None


def proxy_command(timeout: float = 300) -> Path:
    """configurable-http-proxy from npm, installed once into a cache directory outside the repo."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-mgpu-tests"
    final = cache / f"configurable-http-proxy-{PROXY_VERSION}"
    exe = final / "node_modules" / ".bin" / "configurable-http-proxy"
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "the hub tests need Node.js and npm (apt-get install -y nodejs npm)"
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".chp-", dir=cache))
    try:
        run = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(staging),
                "--no-audit",
                "--no-fund",
                "--omit=dev",
                "--no-package-lock",
                "--no-save",
                f"configurable-http-proxy@{PROXY_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert run.returncode == 0, f"npm install configurable-http-proxy failed:\n{run.stderr[-3000:]}"
        try:
            staging.rename(final)
        except OSError:  # another run installed it meanwhile
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    assert exe.exists(), f"{exe} missing after npm install"
    return exe


@dataclass
class HubUser:
    name: str
    home: Path
    uid: int
    token: str = ""
    env: dict[str, str | None] = field(default_factory=dict)  # this user's spawner environment (None: unset)

    @property
    def mgpu_dir(self) -> Path:
        """Where this user's clusters live: ``jupyter_runtime_dir()/jupyter-mgpu`` with HOME as the hub sets it."""
        return self.home / ".local" / "share" / "jupyter" / "runtime" / "jupyter-mgpu"


def _notebook(cells: list[str]) -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"c{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": src,
                }
                for i, src in enumerate(cells)
            ],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


class HubRun:
    """One JupyterHub behind configurable-http-proxy on loopback, with the users added before ``start()``."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mh", dir="/tmp"))
        os.chmod(self.root, 0o755)  # users reach their homes and the Python mirror through it
        self.private = self.root / "hub"
        self.private.mkdir(mode=0o700)
        # deep on purpose, as homes on clusters often are: the cluster's Unix sockets under it are longer
        # than AF_UNIX addresses hold (engine/wire/unix_socket.py reaches them)
        self.homes = self.root / "home" / "research-computing"
        self.homes.mkdir(mode=0o755, parents=True)
        os.chmod(self.homes.parent, 0o755)
        self.system_users = can_make_users()
        if self.system_users:
            remove_leftover_users()
        self.users: dict[str, HubUser] = {}
        self.proc: subprocess.Popen | None = None
        self.password = secrets.token_urlsafe(PASSWORD_LENGTH)
        self.api_token = secrets.token_hex(24)
        self._held = [HeldPort(), HeldPort(), HeldPort()]  # the hub's, its API's and the proxy's API, till it answers
        self.port = self._held[0].port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.private / "jupyterhub.log"
        self._log = None
        self.python: UserPython | None = None
        self.fake_gpus: Path | None = None  # set by whoever installs fake GPUs for a user (tests/hub/fake_gpus.py)

    # -- setting up -----------------------------------------------------------------------------
    def add_user(self, key: str, cells: list[str], env: dict[str, str | None] | None = None) -> HubUser:
        name = f"mgpu-{key}-{secrets.token_hex(3)}"
        home = self.homes / name
        home.mkdir(mode=0o700)
        if self.system_users:
            subprocess.run(
                ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/sh", "--user-group", name],
                check=True,
                capture_output=True,
                timeout=30,
            )
            uid = pwd.getpwnam(name).pw_uid
        else:
            uid = os.getuid()
        self.users[key] = user = HubUser(name, home, uid, env=dict(env or {}))
        settings = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(json.dumps(LAB_QUIET))
        (home / "hub.ipynb").write_text(_notebook(cells))
        if self.system_users:
            for path in [home, *home.rglob("*")]:
                os.chown(path, uid, pwd.getpwnam(name).pw_gid, follow_symlinks=False)
        return user

    def _config(self, proxy: Path) -> str:
        assert self.python is not None
        env = {**self.python.env, "JUPYTER_MGPU_FORCE_CPU": "1"}
        spawner = "localprocess" if self.system_users else "simple"
        per_user = {u.name: u.env for u in self.users.values() if u.env}
        return (
            PER_USER_HOOK.format(per_user=per_user)
            + "\n".join(
                [
                    f"c.JupyterHub.bind_url = {self.url + '/'!r}",
                    "c.JupyterHub.hub_ip = '127.0.0.1'",
                    f"c.JupyterHub.hub_port = {self._held[1].port}",
                    f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{self._held[2].port}'",
                    f"c.ConfigurableHTTPProxy.command = [{str(proxy)!r}]",
                    f"c.ConfigurableHTTPProxy.auth_token = {secrets.token_hex(24)!r}",
                    f"c.ConfigurableHTTPProxy.pid_file = {str(self.private / 'proxy.pid')!r}",
                    f"c.JupyterHub.db_url = 'sqlite:///{self.private / 'jupyterhub.sqlite'}'",
                    f"c.JupyterHub.cookie_secret_file = {str(self.private / 'cookie_secret')!r}",
                    f"c.JupyterHub.pid_file = {str(self.private / 'jupyterhub.pid')!r}",
                    "c.JupyterHub.cleanup_servers = True",
                    "c.JupyterHub.shutdown_on_logout = True",
                    "c.JupyterHub.authenticator_class = 'shared-password'",
                    f"c.SharedPasswordAuthenticator.user_password = {self.password!r}",
                    f"c.Authenticator.allowed_users = { {u.name for u in self.users.values()}!r}",
                    f"c.JupyterHub.spawner_class = {spawner!r}",
                    f"c.SimpleLocalProcessSpawner.home_dir_template = {str(self.homes) + '/{username}'!r}",
                    f"c.Spawner.cmd = [{str(self.python.python)!r}, '-m', 'jupyterhub.singleuser']",
                    "c.Spawner.args = ['--LabApp.expose_app_in_browser=True']",
                    "c.Spawner.default_url = '/lab'",
                    f"c.Spawner.environment = {env!r}",
                    "c.Spawner.env_keep = ['LANG', 'LC_ALL']",
                    "c.Spawner.pre_spawn_hook = per_user_environment",
                    "c.Spawner.start_timeout = 180",
                    # a spawn request answers at once (202): the servers start together, not one after another
                    "c.JupyterHub.tornado_settings = {'slow_spawn_timeout': 0}",
                    "c.Spawner.http_timeout = 180",
                    "c.LocalProcessSpawner.interrupt_timeout = 15",
                    "c.LocalProcessSpawner.term_timeout = 10",
                    "c.JupyterHub.services = [{'name': 'mgpu-tests', 'api_token': %r}]" % self.api_token,
                    "c.JupyterHub.load_roles = [{'name': 'mgpu-tests', 'services': ['mgpu-tests'], 'scopes': "
                    "['admin:users', 'admin:servers', 'admin:server_state', 'tokens', 'list:users']}]",
                ]
            )
            + "\n"
        )

    def start(self, timeout: float = 120) -> None:
        """Build the users' Python, start the hub (which starts the proxy) and wait until it answers."""
        self.python = build_user_python(self.root / "env")
        proxy = proxy_command()
        config = self.private / "jupyterhub_config.py"
        config.write_text(self._config(proxy))
        self._log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config)],
            cwd=self.private,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if requests.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"JupyterHub did not start within {timeout:.0f} s:\n{self.log_tail()}")
                time.sleep(0.3)
        finally:
            for held in self._held:
                held.release()
        for user in self.users.values():
            user.token = self.api("POST", f"users/{user.name}/tokens", json={"note": "mgpu tests"}).json()["token"]

    # -- using it ------------------------------------------------------------------------------
    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call the hub's REST API as the tests' admin service."""
        r = requests.request(
            method,
            f"{self.url}/hub/api/{path}",
            timeout=30,
            headers={"Authorization": f"token {self.api_token}"},
            **kwargs,
        )
        assert r.status_code < 400, f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r

    def user_url(self, user: HubUser) -> str:
        return f"{self.url}/user/{user.name}/"

    def server(self, user: HubUser) -> dict | None:
        """The hub's model of the user's server (``ready``, ``state.pid``), or None when it is not running."""
        return self.api("GET", f"users/{user.name}").json().get("servers", {}).get("")

    def start_server(self, user: HubUser, timeout: float = 180) -> int:
        """Start the user's server (if it is not running) and wait until it is ready; returns its pid."""
        if self.server(user) is None:
            self.api("POST", f"users/{user.name}/server")
        deadline = time.monotonic() + timeout
        while True:
            model = self.server(user)
            if model and model.get("ready"):
                # the hub marks a server ready just before it adds the proxy's route to it
                r = requests.get(
                    f"{self.user_url(user)}api/status",
                    headers={"Authorization": f"token {user.token}"},
                    timeout=10,
                    allow_redirects=False,
                )
                if r.status_code == 200:
                    return int(model["state"]["pid"])
            assert time.monotonic() < deadline, f"{user.name}'s server not ready in {timeout} s:\n{self.log_tail()}"
            time.sleep(0.5)

    def stop_server(self, user: HubUser, timeout: float = 90) -> None:
        """Stop the user's server as the hub does at logout, and wait until the hub says it is gone."""
        model = self.server(user)
        if model is not None and model.get("pending") != "stop":
            self.api("DELETE", f"users/{user.name}/server")
        deadline = time.monotonic() + timeout
        while self.server(user) is not None:
            assert time.monotonic() < deadline, f"{user.name}'s server still running after {timeout} s"
            time.sleep(0.5)

    def processes_of(self, user: HubUser) -> list[psutil.Process]:
        """Every live process running as ``user`` (with SimpleLocalProcessSpawner: those naming its home)."""
        out = []
        for p in psutil.process_iter(["uids", "cmdline", "environ"] if not self.system_users else ["uids"]):
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                if (self.system_users and p.info["uids"].real == user.uid) or (
                    not self.system_users and (p.info.get("environ") or {}).get("HOME") == str(user.home)
                ):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    # -- tearing down --------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Stop servers, hub and proxy; kill and report anything left; delete the users and the directory."""
        leaked: list[str] = []
        try:
            if self.proc is not None and self.proc.poll() is None:
                for user in self.users.values():  # all stop at once
                    try:
                        model = self.server(user)
                        if model is not None and model.get("pending") != "stop":
                            self.api("DELETE", f"users/{user.name}/server")
                    except Exception as exc:
                        leaked.append(f"{user.name}'s server did not stop: {exc}")
                for user in self.users.values():
                    try:
                        self.stop_server(user, timeout=60)
                    except Exception as exc:  # still tear the rest down
                        leaked.append(f"{user.name}'s server did not stop: {exc}")
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
                    leaked.append("jupyterhub needed SIGKILL")
            leaked += self._kill_leftovers()
        finally:
            if self._log is not None:
                self._log.close()
            if self.system_users:
                for user in self.users.values():
                    subprocess.run(["userdel", user.name], capture_output=True, timeout=30)
            shutil.rmtree(self.root, ignore_errors=True)
        return leaked

    def _proxy(self) -> list[psutil.Process]:
        """The hub's configurable-http-proxy while it runs (its pid file names it)."""
        try:
            proc = psutil.Process(int((self.private / "proxy.pid").read_text()))
            return [proc] if any("configurable-http-proxy" in a for a in proc.cmdline()) else []
        except (OSError, ValueError, psutil.Error):
            return []

    def _kill_leftovers(self) -> list[str]:
        leaked = []
        deadline = time.monotonic() + 10
        while True:
            left = {p.pid: p for u in self.users.values() for p in self.processes_of(u)}
            left.update((p.pid, p) for p in self._proxy())
            for p in psutil.process_iter(["cmdline"]):
                try:
                    if any(str(self.root) in a for a in (p.info["cmdline"] or [])) and p.pid != os.getpid():
                        left[p.pid] = p
                except psutil.Error:
                    continue
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # processes still exiting after their server stopped
        for pid, p in left.items():
            try:
                leaked.append(f"{pid} {' '.join(p.cmdline())[:200]}")
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(list(left.values()), timeout=5)
        return leaked
