"""A Python that the hub's users can run: this interpreter and this environment, mirrored where they can reach.

The test environment may live where other users cannot go (a pyenv interpreter under ``/root``, mode
0700; a clone of the repo under it). A real site installs Python for its users somewhere they can read;
the tests do the same for the duration of the hub: a world-readable directory holds

- ``python/``: the base interpreter's prefix (``sys.base_prefix``),
- ``venv/``: this environment (``sys.prefix``), its ``pyvenv.cfg`` and ``bin/python*`` pointed at the
  mirrored interpreter, and every script's ``#!`` line at the mirrored ``bin/python``,
- ``src/jupyter_mgpu``: the package when it is installed in editable mode (a ``.pth`` points there).

Files are hard links where the filesystem allows (a few seconds for ~100k files) and copies otherwise;
a file that other users could not read is copied with read permission added, never chmod-ed in place,
and every file the mirror changes is unlinked first, so the originals are never touched. Nothing
outside the mirror changes; removing the directory removes everything.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

STDLIB = f"lib/python{sys.version_info.major}.{sys.version_info.minor}"
# what nobody's server needs: the interpreter's own test suite and GUI tools, C headers, and the packages
# installed into the base interpreter (the environment does not see them unless its pyvenv.cfg says so)
SKIP_BASE = {"share", "include", *(f"{STDLIB}/{d}" for d in ("test", "idlelib", "tkinter", "turtledemo", "ensurepip"))}


@dataclass(frozen=True)
class UserPython:
    """The mirrored environment: run ``python`` with ``env`` (added to the user's environment)."""

    root: Path
    python: Path
    venv: Path
    env: dict[str, str]


def _place(src: str, dst: str) -> None:
    """Hard-link ``src`` at ``dst`` when others may read it; else (or across filesystems) copy it readable."""
    mode = os.stat(src).st_mode
    if mode & stat.S_IROTH:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
    os.chmod(dst, stat.S_IMODE(mode) | 0o444 | (0o111 if mode & stat.S_IXUSR else 0))


def _mirror(src: Path, dst: Path, retarget: dict[str, str], skip: set[str] = frozenset()) -> None:
    """Mirror the tree ``src`` at ``dst`` (dirs 0755) but the relative paths in ``skip``; absolute symlinks into
    mirrored trees are retargeted."""
    for here, dirs, files in os.walk(src):
        rel = os.path.relpath(here, src)
        dirs[:] = [d for d in dirs if d != "node_modules" and os.path.normpath(os.path.join(rel, d)) not in skip]
        out = dst if rel == "." else dst / rel
        out.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(out, 0o755)
        for name in dirs + files:
            path = os.path.join(here, name)
            if os.path.islink(path):
                target = os.readlink(path)
                for old, new in retarget.items():
                    if target == old or target.startswith(old + os.sep):
                        target = new + target[len(old) :]
                        break
                os.symlink(target, out / name)
                if name in dirs:
                    dirs.remove(name)  # a symlinked directory is mirrored as the link only
            elif name in files:
                _place(path, str(out / name))


def _rewrite(path: Path, text: str) -> None:
    """Replace a mirrored file without touching the original it may be a hard link of."""
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    path.unlink(missing_ok=True)
    path.write_text(text)
    os.chmod(path, mode | 0o444)


def _editable_source() -> Path | None:
    """The directory holding ``jupyter_mgpu`` when it is installed in editable mode (outside sys.prefix)."""
    import jupyter_mgpu

    package = Path(jupyter_mgpu.__file__).resolve().parent
    return None if package.is_relative_to(Path(sys.prefix).resolve()) else package.parent


def build_user_python(root: Path) -> UserPython:
    """Mirror this interpreter and environment under ``root`` (made 0755) for other users to run."""
    if sys.prefix == sys.base_prefix:
        raise RuntimeError("the hub tests expect to run in a virtual environment (python -m venv .venv)")
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix)
    python, env_dir = root / "python", root / "venv"
    retarget = {str(base): str(python), str(venv): str(env_dir), str(venv.resolve()): str(env_dir)}
    system_site = "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text().replace("True", "true")
    _mirror(base, python, retarget, skip=SKIP_BASE | (set() if system_site else {f"{STDLIB}/site-packages"}))
    _mirror(venv, env_dir, retarget, skip={"include"})

    exe = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert (python / "bin" / exe).exists(), f"no {exe} in {base}/bin"
    cfg = (venv / "pyvenv.cfg").read_text().splitlines()
    cfg = [f"home = {python / 'bin'}" if line.split("=")[0].strip() == "home" else line for line in cfg]
    _rewrite(
        env_dir / "pyvenv.cfg",
        "\n".join(line for line in cfg if line.split("=")[0].strip() not in ("executable", "command")) + "\n",
    )
    for name in ("python", "python3", exe):
        link = env_dir / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(python / "bin" / exe)
    old_shebangs = {f"#!{venv}/bin/python".encode(), f"#!{venv.resolve()}/bin/python".encode()}
    for script in (env_dir / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head = script.read_bytes()[:512]
            if any(head.startswith(s) for s in old_shebangs):
                text = script.read_text()
                _rewrite(script, f"#!{env_dir}/bin/python" + text[text.index("\n") :])

    site = env_dir / "lib" / exe / "site-packages"
    source = _editable_source()
    if source is not None:
        _mirror(source / "jupyter_mgpu", root / "src" / "jupyter_mgpu", retarget)
        for pth in site.glob("*.pth"):
            if str(source) in pth.read_text().split():
                pth.unlink()
        _rewrite(site / "_mgpu_hub_src.pth", f"{root / 'src'}\n")
    for parent in [root, *root.parents]:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            raise RuntimeError(f"{parent} is not searchable by other users; the mirror at {root} is unreachable")
    env = {
        "PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(python / "lib"),  # the interpreter's RUNPATH names the original prefix
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return UserPython(root=root, python=env_dir / "bin" / "python", venv=env_dir, env=env)
