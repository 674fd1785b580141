"""Real torch DTensors on real ranks, seen from the notebook: ``mg.from_dtensor`` reads their layout
and gathers them (Partial reduced first), ``DistTensor.to_dtensor`` makes one from our shards (sharing
memory where the splits agree), and ``mg.show`` draws exactly the pieces the ranks hold — on 1-D, 2-D
and 3-D meshes, every placement kind, even and uneven sizes, 2 and 4 ranks."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout.mesh import Mesh, Partial, mesh_shard_table
from jupyter_mgpu.layout.placement import Replicate, Shard

pytestmark = pytest.mark.cluster

KINDS = [Shard(0), Shard(1), Replicate(), Partial()]
MESHES = {4: [((4,), ("world",)), ((2, 2), ("dp", "tp")), ((1, 2, 2), ("pp", "dp", "tp"))], 2: [((2,), None)]}


def _bind_on_rank(mesh_shape, names, cases):
    """On every rank: distribute each global tensor and bind it to its name; return the real pieces."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    from jupyter_mgpu.engine.execution import namespace_transfer

    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=names)
    ns, real = namespace_transfer.user_ns(), {}
    for name, shape, kinds in cases:
        g = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
        pls = [TS(k[1]) if k[0] == "S" else TR() if k[0] == "R" else TP() for k in kinds]
        dt = distribute_tensor(g, mesh, pls)
        ns[name] = dt
        local_shape, offset = compute_local_shape_and_global_offset(dt.shape, mesh, dt.placements)
        real[name] = (tuple(dt.to_local().shape), tuple(offset), tuple(local_shape))
    return real


def _spell(p):
    return ("S", p.dim) if isinstance(p, Shard) else ("R",) if isinstance(p, Replicate) else ("P",)


def _shown_boxes(data):
    """Per rank, the (rows, cols) boxes the view draws for it."""
    out = {}
    for rank, b in data["frames"][0]["add"]:
        blk = data["blocks"][b]
        out.setdefault(rank, []).append(((blk[1], blk[2]), (blk[3], blk[4])))
    return out


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4: the 2-d meshes
def test_from_dtensor_sees_every_mesh_and_gathers_the_global_tensor(session_of, n):
    s = session_of(n)
    for (mesh_shape, names), shape in itertools.product(MESHES[n], [(8, 6), (5, 7)]):
        combos = list(itertools.product(KINDS, repeat=len(mesh_shape)))
        cases = [(f"dt_{i}", shape, [_spell(p) for p in combo]) for i, combo in enumerate(combos)]
        real = s.run(_bind_on_rank, mesh_shape, names, cases, timeout=240)
        g = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
        for (name, _, _), combo in zip(cases, combos):
            h = mg.from_dtensor(name)
            assert h.shape == shape and h.dtype == torch.float32
            assert h.mesh == Mesh(mesh_shape, names) and h.placements == tuple(combo)
            assert h.local_shapes == [real[r][name][0] for r in range(n)]
            assert h.bytes_per_rank == [math.prod(real[r][name][0]) * 4 for r in range(n)]
            assert torch.equal(h.gather(), g), (name, combo)  # Partial values reduced first
            out = torch.empty(shape)
            assert h.gather(out=out) is out and torch.equal(out, g)
            shown = _shown_boxes(mg.show(h).data)  # the view draws exactly each rank's real piece
            for r in range(n):
                local, offset, _ = real[r][name]
                box = tuple((o, o + sz) for o, sz in zip(offset, local))
                assert shown.get(r, []) == ([box] if math.prod(local) else []), (name, combo, r)
    s.run(_drop_names, [c[0] for c in cases])


def _drop_names(names):
    from jupyter_mgpu.engine.execution import namespace_transfer

    ns = namespace_transfer.user_ns()
    for name in list(ns):
        if name.startswith("dt_") or name in names:
            del ns[name]


def test_partial_and_replicas_are_drawn_as_such_and_the_text_needs_no_rich(s4):
    s4.run(_bind_on_rank, (2, 2), ("dp", "tp"), [("pr", (6, 4), [("P",), ("R",)])])
    h = mg.from_dtensor("pr")
    view = mg.show(h)
    assert view.data["partial"] == "P(sum)" and "P(sum)" in view.svg()
    assert len(view.data["blocks"]) == 1 and len(view.data["frames"][0]["add"]) == 4  # one block, four holders
    tips = view.data["tips"][0][0]
    assert "rank 3 at mesh (1, 1), a full-size operand of P(sum): 0:6 × 0:4, local shape (6, 4), 96 B" in tips
    text = mg.show(h, text=True)
    assert repr(text) == str(text) and "[P(sum), R]" in text and "0,1,2,3 P(sum)" in text
    assert "rank 2 at (1, 0): local (6, 4), 96 B, a full-size operand of P(sum)" in repr(h)
    s4.run(_drop_names, ["pr"])


def _local_ptr(hid, name):
    from jupyter_mgpu.engine.execution import namespace_transfer
    from jupyter_mgpu.engine.shards import shard_store as store

    dt = namespace_transfer.user_ns()[name]
    return dt.to_local().data_ptr() == store.get(hid).data_ptr(), dt.full_tensor().sum().item()


@pytest.mark.parametrize(
    "shape, placement, mesh, placements, shares",
    [
        ((8, 6), Shard(0), None, None, True),  # our split is DTensor's: the shards themselves
        ((10, 6), Shard(0), None, None, False),  # 3,3,2,2 against torch.chunk's 3,3,3,1: moved once
        ((8, 6), Shard(1), Mesh((2, 2), ("dp", "tp")), None, False),  # nested S(1), S(1): the same boxes
        ((8, 6), Replicate(), Mesh((2, 2)), [Shard(0), Replicate()], False),
        ((8, 6), mg.Block2D(2, 2), None, None, True),
        ((7, 5), mg.Block2D(2, 2), None, None, True),  # halves split alike: 4, 3 rows and 3, 2 cols in both
        ((8, 5), Shard(1), None, None, False),  # 2,1,1,1 against 2,2,1,0 (an empty piece on rank 3)
    ],
)
def test_to_dtensor_round_trip(s4, shape, placement, mesh, placements, shares):
    A = mg.randn(*shape, placement=placement, seed=3)
    h = A.to_dtensor("a_dt", mesh=mesh, placements=placements)
    assert h.shape == shape and h.layout.mesh.size == 4
    assert torch.equal(h.gather(), A.gather())
    same = s4.run(_local_ptr, A.handle_id, "a_dt")
    assert all(v[1] == pytest.approx(float(A.gather().sum()), rel=1e-5) for v in same)  # full_tensor on the ranks
    assert all(v[0] for v in same) == shares  # the shards themselves exactly where the two splits agree
    expected = mesh_shard_table(shape, h.mesh, h.placements)
    assert h.local_shapes == [row.shape for row in expected]
    s4.run(_drop_names, ["a_dt"])


def test_bad_names_and_mixed_bindings_are_one_sentence(s2):
    with pytest.raises(MgpuError, match="NameError on ranks 0, 1: name 'nope' is not defined on the ranks"):
        mg.from_dtensor("nope")
    s2.run(_bind_local, "notdt")
    with pytest.raises(MgpuError, match="TypeError on ranks 0, 1: 'notdt' is a int on the ranks, not a torch DTensor"):
        mg.from_dtensor("notdt")
    with pytest.raises(MgpuError, match="needs the name"):
        mg.from_dtensor("a b")
    A = mg.ones(4, 4)
    with pytest.raises(MgpuError, match="not Partial"):
        A.to_dtensor("x", placements=[Partial()])
    with pytest.raises(MgpuError, match="must hold every rank"):
        A.to_dtensor("x", mesh=Mesh((4,)))


def _bind_local(name):
    from jupyter_mgpu.engine.execution import namespace_transfer

    namespace_transfer.put({name: 3})


def test_the_authors_dtensor_cell_then_mgpu_show_and_from_dtensor(s4, capsys):
    """The question that started the project, as its author wrote it, in one cell on every rank."""
    from ipshell import shell

    ip = shell()
    r = ip.run_cell(
        "%%mgpu\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import distribute_tensor, Shard, Replicate\n"
        "mesh = init_device_mesh('cpu', (4,))\n"
        "torch.manual_seed(0)\n"
        "a = distribute_tensor(torch.randn(12, 8), mesh, [Shard(0)])\n"
        "b = distribute_tensor(torch.randn(8, 6), mesh, [Replicate()])\n"
        "c = torch.mm(a, b)\n"
        "mgpu.show(c, 'c')"
    )
    assert r.success, r.error_in_exec
    values = r.result
    assert len(values.groups()) == 1  # every rank returns the same layout: shown once
    html = ip.display_formatter.formatters["text/html"].lookup(values[0])(values[0])  # what a notebook shows
    assert "<svg" in html and "[S(0)] on mesh (4)" in html  # drawn here as mg.show draws it
    assert "c: tensor (12, 6) on mesh (4,): [S(0)]" in repr(values[0])  # the ranks' own text
    c = mg.from_dtensor("c")
    a, b = mg.from_dtensor("a").gather(), mg.from_dtensor("b").gather()
    torch.testing.assert_close(c.gather(), a @ b)
    assert c.local_shapes == [(3, 6)] * 4
    capsys.readouterr()
    s4.run(_drop_names, ["a", "b", "c", "mesh"])
