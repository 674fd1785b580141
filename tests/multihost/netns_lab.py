"""Several honest "hosts" on one machine, for the multi-host tests: Linux namespaces and real daemons.

A :class:`Host` is a process tree in its own network, PID, mount, IPC and UTS namespaces (``unshare``):
its own hostname, loopback, ``/proc``, ``/dev/shm``, ``/tmp``, ``/run`` and ``/home`` (fresh tmpfs),
its own ``/etc`` (a copy bind-mounted over the real one inside it, its user and hosts added), and
``/root`` replaced by an empty home in which only the paths this Python needs are bound back. So
shared memory, ``process_vm_*``, PIDs and hostnames do not leak between hosts. :class:`Lab` joins
hosts with veth pairs on a bridge inside the first host, private ``10.77.0.x/24`` addresses that
exist only in the namespaces; no interface, address or route is added outside them.

Everything a host runs dies with it: the namespace's first process is a reaper started with
``unshare --kill-child`` under a parent-death signal, and :meth:`Host.close` kills it, which ends
every process of its PID namespace and frees its mounts and interfaces. Nothing is written outside
the namespaces but one temporary directory (kernel connection files), removed at the end.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SUBNET = "10.77.0"
IFACE = "mgpu0"  # the cluster interface, same name on every host (a bridge on the first, veths elsewhere)
USER, UID = "mgpu", 4242
REAPER = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
    "os.write(1, b'ready\\n'); os.close(1)\n"  # imports done: the host's set-up may hide the interpreter now
    "while True:\n"
    "    try:\n"
    "        os.waitpid(-1, 0)\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.2)\n"
)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def check_tools() -> None:
    """The lab needs root and util-linux/iproute2; a clear failure (never a skip) otherwise."""
    assert os.geteuid() == 0, "the multi-host tests build network/PID/mount namespaces and need root (CI is root)"
    for tool in ("unshare", "nsenter", "ip", "mount"):
        assert shutil.which(tool), f"the multi-host tests need {tool} (util-linux, iproute2)"


def ensure_packages(wanted: dict[str, str], timeout: float = 600) -> None:
    """``apt-get install`` the packages whose program is missing (``{program: package}``), services not started."""
    missing = sorted({pkg for prog, pkg in wanted.items() if shutil.which(prog) is None and not os.path.exists(prog)})
    if not missing:
        return
    assert shutil.which("apt-get"), (
        f"the multi-host tests need {', '.join(missing)} and there is no apt-get to install them"
    )
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = not policy.exists()
    if made_policy:  # never start the packages' system services (sshd, munge, slurm) on this machine
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq", "--no-install-recommends", *missing],
        ):
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            assert run.returncode == 0, f"{' '.join(cmd)} failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    still = [prog for prog in wanted if shutil.which(prog) is None and not os.path.exists(prog)]
    assert not still, f"installed {', '.join(missing)} but {', '.join(still)} is still missing"


def _needed_paths() -> list[str]:
    """What a process of this Python must reach: the interpreter, this environment, this checkout."""
    import jupyter_mgpu

    repo = str(Path(jupyter_mgpu.__file__).resolve().parent.parent)
    return sorted(
        {
            os.path.realpath(sys.executable),
            sys.prefix,
            sys.base_prefix,
            os.path.realpath(sys.prefix),
            os.path.realpath(sys.base_prefix),
            repo,
            shutil.which("c++") or "/usr/bin/c++",
        }
    )


def _overmounts(force: list[str]) -> list[tuple[str, list[str]]]:
    """Directories on the way to :func:`_needed_paths` that others cannot pass (plus ``force``), with the
    children that must stay reachable in each: each gets an empty tmpfs with those children bound back."""
    need: dict[str, set[str]] = {d: set() for d in force}
    for path in _needed_paths():
        parts = Path(path).parts
        for i in range(1, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent in need or not os.stat(parent).st_mode & 0o001:
                need.setdefault(parent, set()).add(parts[i])
    return sorted(((d, sorted(c)) for d, c in need.items()), key=lambda item: len(Path(item[0]).parts))


class Host:
    """One namespace "host" with its own hostname and (optionally) an sshd for a key-only user."""

    def __init__(self, name: str, index: int, workdir: Path, iface: str = IFACE) -> None:
        self.name, self.index, self.iface = name, index, iface
        self.address = f"{SUBNET}.{index + 1}"
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        err_log = open(workdir / f"unshare-{name}.log", "wb")
        self.proc = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--pid",
                "--mount",
                "--ipc",
                "--uts",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--propagation",
                "private",
                sys.executable,
                "-c",
                REAPER,
            ],
            preexec_fn=_die_with_parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err_log,
        )
        err_log.close()
        # wait for the reaper's word, not only for unshare's child: prepare() mounts over /root, /tmp and the
        # like, and a reaper still importing its stdlib from there dies, and the whole namespace with it
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        said = self.proc.stdout.readline() if ready else b""
        self.proc.stdout.close()
        kids = psutil.Process(self.proc.pid).children() if said == b"ready\n" else []
        if not kids:
            self.proc.kill()
            self.proc.wait(5)
            err = (workdir / f"unshare-{name}.log").read_text(errors="replace")[-1000:]
            raise RuntimeError(f"unshare did not start host {name}: {err or 'no word from its reaper in 30 s'}")
        self.pid = kids[0].pid
        self.pid_ns = os.stat(f"/proc/{self.pid}/ns/pid").st_ino

    # -- running things inside -----------------------------------------------------------------
    def cmd(self, argv: list[str], namespaces: str = "npmiu") -> list[str]:
        flags = [f"-{c}" for c in namespaces]
        return ["nsenter", "-t", str(self.pid), *flags, "--", *argv]

    def sh(self, script: str, timeout: float = 60, check: bool = True, user: str | None = None) -> str:
        """Run a shell script inside the host (as ``user`` if given); its output."""
        argv = ["sh", "-c", script] if user is None else ["su", "-s", "/bin/sh", user, "-c", script]
        run = subprocess.run(self.cmd(argv), capture_output=True, text=True, timeout=timeout)
        if check and run.returncode != 0:
            raise RuntimeError(
                f"on {self.name}: {script[:200]!r} failed ({run.returncode}): {run.stderr[-2000:]}{self._state()}"
            )
        return run.stdout

    def _state(self) -> str:
        """Said when a command in the host fails: whether the host itself ended, and what unshare wrote."""
        try:
            self.proc.wait(1)
        except subprocess.TimeoutExpired:
            return ""
        log = (self.workdir / f"unshare-{self.name}.log").read_text(errors="replace")[-1000:]
        return f"; the host itself ended (unshare exit {self.proc.returncode}): {log}"

    def popen(self, argv: list[str], log: str, **kwargs) -> subprocess.Popen:
        """A long-running process inside the host (logging to ``log`` in the lab's directory)."""
        out = open(self.workdir / log, "ab")
        proc = subprocess.Popen(self.cmd(argv), stdout=out, stderr=out, stdin=subprocess.DEVNULL, **kwargs)
        out.close()
        self.procs.append(proc)
        return proc

    def path(self, inside: str) -> Path:
        """The file ``inside`` of this host, seen from outside (root only)."""
        return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")

    def processes(self) -> list[psutil.Process]:
        """Every process in this host's PID namespace but its reaper (zombies excluded)."""
        out = []
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if (
                    p.pid != self.pid
                    and p.info["status"] != psutil.STATUS_ZOMBIE
                    and os.stat(f"/proc/{p.pid}/ns/pid").st_ino == self.pid_ns
                ):
                    out.append(p)
            except (OSError, psutil.Error):
                continue
        return out

    # -- building ------------------------------------------------------------------------------
    def prepare(self, hosts: list[Host], user: bool, networked: bool = True) -> None:
        """Private filesystems, hostname, loopback, users and names; the Python reachable for ``user``."""
        home = pwd.getpwuid(0).pw_dir
        lines = [
            "set -e",
            "mount -t tmpfs -o mode=0755 tmpfs /run",
            "mkdir -p /run/lab/etc /run/lab/keep /run/sshd",
            f"hostname {self.name}",
            "ip link set lo up",
        ]
        # /tmp, /dev/shm and /home are fresh and empty too, but a checkout or venv under one of them (CI may
        # clone into /tmp) is bound back, like everything else the Python in here needs
        fresh = {"/tmp": "1777", "/dev/shm": "1777", "/home": "0755"}
        for i, (directory, children) in enumerate(_overmounts([home, *fresh])):
            keep = f"/run/lab/keep/{i}"
            lines += [
                f"mkdir -p {keep}",
                f"mount --bind {shlex.quote(directory)} {keep}",
                f"mount -t tmpfs -o mode={fresh.get(directory, '0755')} tmpfs {shlex.quote(directory)}",
            ]
            for child in children:
                src, dst = f"{keep}/{child}", f"{directory}/{child}"
                make = (
                    f"mkdir -p {shlex.quote(dst)}"
                    if os.path.isdir(os.path.join(directory, child))
                    else f"touch {shlex.quote(dst)}"
                )
                lines += [make, f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}"]
        names = "".join(f"{h.address} {h.name}\n" for h in hosts)
        if not networked:  # a host alone still needs an address beyond loopback (getaddrinfo's AI_ADDRCONFIG)
            lines += [
                f"ip link add {self.iface} type veth peer name {self.iface}p",  # both ends stay inside
                f"ip addr add {self.address}/24 dev {self.iface}",
                f"ip link set {self.iface}p up",
                f"ip link set {self.iface} up",
            ]
            names = f"{self.address} {self.name}\n"
        extra = {"hosts": names}
        if user:
            extra.update(
                passwd=f"{USER}:x:{UID}:{UID}:{USER}:/home/{USER}:/bin/sh\n",
                group=f"{USER}:x:{UID}:\n",
                shadow=f"{USER}:*:19000:0:99999:7:::\n",
            )
        # a copy of the whole of /etc, bound over it: a file bound over /etc/passwd alone is unmounted in here
        # the moment anything outside replaces that file (useradd and userdel rename a new one over it: the hub
        # tier's users on the other worker), and sshd then found no such user. Files that vanish while it copies
        # (useradd's passwd.lock, passwd+) are no loss; any other error of cp is
        lines.append(
            "if ! cp -a /etc/. /run/lab/etc/ 2>/run/lab/cp.err; then"
            " if grep -v 'No such file or directory' /run/lab/cp.err >&2; then exit 1; fi; fi"
        )
        lines.append("test -s /run/lab/etc/passwd")
        lines += [f"printf %s {shlex.quote(add)} >> /run/lab/etc/{name}" for name, add in extra.items()]
        lines.append("mount --bind /run/lab/etc /etc")
        if user:
            lines += [
                f"mkdir -p /home/{USER}/.ssh",
                f"chown -R {UID}:{UID} /home/{USER}",
                f"chmod 0700 /home/{USER} /home/{USER}/.ssh",
            ]
        self.sh("\n".join(lines))

    def start_sshd(self, client_pub: str) -> str:
        """sshd on this host's address for the key-only user; returns the host's public key line."""
        self.sh("mkdir -p /run/lab/ssh && ssh-keygen -q -t ed25519 -N '' -f /run/lab/ssh/host_key")
        keys = self.path(f"/home/{USER}/.ssh/authorized_keys")
        keys.write_text(client_pub)
        os.chown(keys, UID, UID)
        keys.chmod(0o600)
        self.path("/run/lab/ssh/sshd_config").write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}",
                    "Port 22",
                    "HostKey /run/lab/ssh/host_key",
                    "PidFile /run/lab/ssh/sshd.pid",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin no",
                    f"AllowUsers {USER}",
                    "X11Forwarding no",
                    "PrintMotd no",
                    "Subsystem sftp internal-sftp",
                    "LogLevel VERBOSE",
                    "MaxStartups 64:30:128",
                    "",
                ]
            )
        )
        self.popen(["/usr/sbin/sshd", "-D", "-e", "-f", "/run/lab/ssh/sshd_config"], f"sshd-{self.name}.log")
        deadline = time.monotonic() + 15
        while "LISTEN" not in self.sh("ss -ltn 'sport = :22' || true", check=False):
            assert time.monotonic() < deadline, (
                f"sshd did not start on {self.name}: " + (self.workdir / f"sshd-{self.name}.log").read_text()[-1000:]
            )
            time.sleep(0.05)
        return self.path("/run/lab/ssh/host_key.pub").read_text().strip()

    def close(self) -> None:
        """Kill the namespace's first process: the kernel ends every process in it; then reap ours."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for proc in [*self.procs, self.proc]:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


class Lab:
    """``Lab(["hosta", "hostb", "hostc"], ssh=True)``: hosts on one private segment, sshd on all but the first.

    ``ifaces`` names a host's interface on the segment otherwise than ``mgpu0`` (real clusters differ too).
    """

    def __init__(
        self, names: list[str], ssh: bool = False, network: bool = True, ifaces: dict[str, str] | None = None
    ) -> None:
        check_tools()
        self.workdir = Path(tempfile.mkdtemp(prefix="mgpu-lab-", dir="/var/tmp"))
        os.chmod(self.workdir, 0o700)
        self.hosts: list[Host] = []
        try:
            for i, name in enumerate(names):
                self.hosts.append(Host(name, i, self.workdir, (ifaces or {}).get(name, IFACE)))
            for h in self.hosts:
                h.prepare(self.hosts, user=ssh and h is not self.hosts[0], networked=network and len(names) > 1)
            if network and len(self.hosts) > 1:
                self._wire()
            if ssh:
                self._ssh()
        except BaseException:
            self.close()
            raise

    @property
    def first(self) -> Host:
        return self.hosts[0]

    def _wire(self) -> None:
        a = self.first
        a.sh(f"ip link add {IFACE} type bridge && ip addr add {a.address}/24 dev {IFACE} && ip link set {IFACE} up")
        for h in self.hosts[1:]:
            peer = f"v{h.index}"
            subprocess.run(
                h.cmd(["ip", "link", "add", h.iface, "type", "veth", "peer", "name", peer, "netns", str(a.pid)], "n"),
                check=True,
                capture_output=True,
            )
            h.sh(f"ip addr add {h.address}/24 dev {h.iface} && ip link set {h.iface} up")
            a.sh(f"ip link set {peer} master {IFACE} && ip link set {peer} up")

    def reachable(self, host: Host, port: int, timeout: float = 15) -> None:
        """Wait until the first host can open a TCP connection to ``host:port`` over the segment."""
        probe = f"import socket; socket.create_connection(({host.address!r}, {port}), 1).close()"
        deadline = time.monotonic() + timeout
        while subprocess.run(self.first.cmd([sys.executable, "-c", probe], "n"), capture_output=True).returncode:
            assert time.monotonic() < deadline, f"{host.name} does not answer on {host.address}:{port}"
            time.sleep(0.05)

    def _ssh(self) -> None:
        a = self.first
        a.sh("mkdir -p ~/.ssh && chmod 700 ~/.ssh && ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519")
        home = pwd.getpwuid(0).pw_dir
        pub = a.path(f"{home}/.ssh/id_ed25519.pub").read_text()
        known = []
        for h in self.hosts[1:]:
            key = h.start_sshd(pub)
            self.reachable(h, 22)
            known.append(f"{h.name},{h.address} {key}\n")
        a.path(f"{home}/.ssh/known_hosts").write_text("".join(known))
        a.path(f"{home}/.ssh/config").write_text(
            f"Host *\n  User {USER}\n  IdentityFile {home}/.ssh/id_ed25519\n  StrictHostKeyChecking yes\n"
            f"  UserKnownHostsFile {home}/.ssh/known_hosts\n  BatchMode yes\n  ConnectTimeout 10\n"
            # one SSH connection per host, reused by every command the launcher runs there
            f"  ControlMaster auto\n  ControlPath /tmp/ssh-%C\n  ControlPersist 60\n"
        )
        for h in self.hosts[1:]:  # a real login as the key-only user, or the sshd log says why not
            for attempt in range(3):
                run = subprocess.run(a.cmd(["ssh", h.name, "true"]), capture_output=True, text=True, timeout=60)
                if run.returncode == 0:
                    break
                time.sleep(1)
            assert run.returncode == 0, (
                f"ssh {h.name} failed: {run.stderr[-500:]}\n"
                + (self.workdir / f"sshd-{h.name}.log").read_text()[-2000:]
            )

    def processes(self) -> dict[str, list[psutil.Process]]:
        return {h.name: h.processes() for h in self.hosts}

    def close(self) -> None:
        for h in self.hosts:
            h.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def python_processes(host) -> list:
    """A host's processes other than its sshd (engines, nannies, launchers' helpers)."""
    out = []
    for p in host.processes():
        try:
            if p.name() != "sshd":
                out.append(p)
        except Exception:
            pass
    return out


def wait_quiet(hosts, timeout: float = 20.0) -> dict:
    """Wait until no process but sshd runs on ``hosts``; returns what still runs (host -> cmdlines)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {}
        for h in hosts:
            procs = python_processes(h)
            if procs:
                left[h.name] = [" ".join(p.cmdline()[:4]) for p in procs if p.is_running()]
        if not left or time.monotonic() > deadline:
            return {k: v for k, v in left.items() if v}
        time.sleep(0.1)
