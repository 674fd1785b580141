"""The players' shared transport (``widgets/transport.py``): one ES module per player, and the stepping rules."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from jupyter_mgpu.widgets import transport as tr

PLAYERS = ["player.js", "placement.js", "schedule.js"]


def _top_level_functions(js: str) -> list[str]:
    return re.findall(r"^(?:export\s+)?function\s+(\w+)", js, flags=re.M)


@pytest.mark.parametrize("name", PLAYERS)
def test_a_players_module_is_the_transport_then_the_player(name):
    shared = (tr.STATIC / "transport.js").read_text(encoding="utf-8")
    own = (tr.STATIC / name).read_text(encoding="utf-8")
    src = tr.module_source(name)
    assert src.startswith(shared) and src.endswith(own) and len(src) == len(shared) + 1 + len(own)
    assert src.count("export default") == 1  # the player's render; the transport exports nothing
    assert not re.search(r"^\s*import\b", src, flags=re.M)  # one module: nothing to import from the other
    names = _top_level_functions(src)
    assert len(names) == len(set(names)), "a function the player defines again would clash with the transport's"
    assert {"transport", "render"} <= set(names)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("name", PLAYERS)
def test_a_players_module_parses_as_one_es_module(name, tmp_path):
    path = tmp_path / f"{name}.mjs"
    path.write_text(tr.module_source(name), encoding="utf-8")
    done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_a_missing_module_is_an_error_not_the_transport_alone():
    with pytest.raises(FileNotFoundError):
        tr.module_source("no-such-player.js")


class Frames(tr.TransportWidget):
    """A transport over ``count`` frames (a player's frames, without a player)."""

    def __init__(self, count: int, **kw) -> None:
        self.count = count
        super().__init__(**kw)

    @property
    def n_frames(self) -> int:
        return self.count


@pytest.mark.parametrize("count", [0, 1, 5])
def test_the_index_stays_on_a_frame(count):
    w = Frames(count)
    for wanted in (-3, 0, 2, count - 1, count, 99):
        w.index = wanted
        assert w.index == max(0, min(wanted, count - 1))


def test_stepping_forward_stops_playing_at_the_last_frame():
    w = Frames(4)
    w.play()
    assert w.playing and w.index == 0
    assert [w.step() for _ in range(2)] == [1, 2] and w.playing
    assert w.step() == 3 and not w.playing
    assert w.step() == 3  # past the end: stays


def test_a_looping_transport_keeps_playing_at_the_end():
    w = Frames(3, loop=True)
    w.play()
    assert w.step(5) == 2 and w.playing


def test_stepping_back_stops_at_the_first_frame():
    w = Frames(6)
    w.index = 4
    assert w.step(-3) == 1 and w.step(-3) == 0


def test_play_at_the_end_starts_again_and_pause_keeps_the_frame():
    w = Frames(5)
    w.index = 4
    w.play()
    assert w.index == 0 and w.playing
    w.step(2)
    w.pause()
    assert not w.playing and w.index == 2
    w.play()
    assert w.index == 2 and w.playing  # not at the end: from where it was


def test_frames_are_for_a_player_to_say():
    with pytest.raises(NotImplementedError):
        _ = tr.TransportWidget().n_frames
