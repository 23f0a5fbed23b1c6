"""The cached-launch key (launch.py) separates every argument Triton's compiler would separate.

On the GPU the cached path skips ``JITFunction.run``: if two argument values that Triton compiles
differently (alignment, == 1, % 16, int32 vs int64) shared a key, a handle compiled for one would
run the other. Triton's own classifier (``native_specialize_impl``) is the judge here, on CPU.
"""

from __future__ import annotations

import inspect
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

from rmsnorm_kernel.launch import _spec

INTS = st.one_of(
    st.integers(-(2**40), 2**40),
    st.sampled_from([0, 1, 2, 15, 16, 17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -(2**31)]),
)
_BASE = torch.zeros(64, dtype=torch.float32)


def _triton(arg):
    return native_specialize_impl(BaseBackend, arg, False, True, True)


@settings(max_examples=300, derandomize=True)
@given(a=INTS, b=INTS)
def test_equal_int_keys_mean_equal_triton_specialisation(a, b):
    if _spec(a) == _spec(b):
        assert _triton(a) == _triton(b), (a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_equal_tensor_keys_mean_equal_triton_specialisation(dtype):
    base = torch.zeros(64, dtype=dtype)
    views = [base[i:] for i in range(17)] + [_BASE[i:] for i in range(5)]
    for a in views:
        for b in views:
            if _spec(a) == _spec(b):
                assert _triton(a) == _triton(b), (a.dtype, a.data_ptr() % 16, b.data_ptr() % 16)


def test_floats_are_refused_as_specialised_arguments():
    with pytest.raises(TypeError, match="tensors, ints or tensor descriptors"):
        _spec(1.5)


def test_a_descriptor_is_keyed_by_dtype_box_and_padding():
    from triton.tools.tensor_descriptor import TensorDescriptor

    t = torch.zeros(8, 64)

    def desc(rows, base=t):
        return TensorDescriptor(base, [8, 64], [64, 1], [rows, 64])

    assert _spec(desc(2)) == _spec(desc(2))  # the shape and strides are encoded per launch
    assert _spec(desc(2)) != _spec(desc(4))
    assert _spec(desc(2)) != _spec(desc(2, t.to(torch.bfloat16)))


def test_cached_launch_switches_to_the_tensors_device(monkeypatch):
    """The cached path launches inside the tensors' device when another one is current (the
    launcher checks pointers in the current CUDA context), and stays put when it is theirs.
    CPU check of the branch: the CUDA calls are recorded, not made."""
    import contextlib

    from rmsnorm_kernel import launch, ops

    events = []

    @contextlib.contextmanager
    def device(index):
        events.append(("enter", index))
        yield
        events.append(("exit", index))

    kernel = launch.CachedKernel(ops.DW_SUM.fn)
    monkeypatch.setattr(launch, "BACKEND", "cuda")
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "device", device)
    args = (_BASE, _BASE, 4, 64)
    key = kernel.key(args, (32, 128), 4, 1, 1)
    kernel.handles[key] = (lambda *params: events.append(("run", params[3])), "f", "p", ())
    for current in (0, 1):
        monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda c=current: c, raising=False)
        events.clear()
        kernel.launch((2,), args, (), (32, 128), 4, 1, 1)
        expected = [("enter", 1), ("run", 7), ("exit", 1)] if current == 0 else [("run", 7)]
        assert events == expected
    assert kernel.launches["cached"] == 2


class _FakeJit:
    """A stand-in for a ``@triton.jit`` function: its signature is DW_SUM's, and a launch through
    ``[grid](...)`` records the arguments and returns a compiled handle that records its runs."""

    def __init__(self, events):
        from rmsnorm_kernel import ops

        self.fn = ops.DW_SUM.fn.fn
        self.__name__ = "fake"
        self.events = events

    def __getitem__(self, grid):
        events = self.events

        class Compiled:
            function, packed_metadata = "f", "p"

            @staticmethod
            def run(*params):
                events.append(("run", params[9:]))

        def compile_and_launch(*args, **kwargs):
            events.append(("compile", args))
            return Compiled

        return compile_and_launch


@pytest.fixture
def fake_cuda(monkeypatch):
    """CachedKernel's GPU path on CPU: the CUDA calls it makes are answered, not made."""
    import contextlib

    from rmsnorm_kernel import launch

    monkeypatch.setattr(launch, "BACKEND", "cuda")
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    return launch


def test_ints_of_one_class_share_a_handle_and_another_class_compiles(fake_cuda):
    """Ints are keyed on Triton's classes: a new value of a class seen before (a new row count of
    a variable-length batch) takes the cached handle; a value of another class goes through
    ``[grid](...)`` (Triton's own cache) once, then hits too."""
    events = []
    kernel = fake_cuda.CachedKernel(_FakeJit(events))
    for groups in (4, 20, 5, 32, 48, 1, 1):  # classes: a, a, a, b, b, c, c
        kernel.launch((2,), (_BASE, _BASE, groups, 64), (), (32, 128), 4, 1, 0)
    kinds = [e[0] for e in events]
    assert kinds == ["compile", "run", "run", "compile", "run", "compile", "run"]
    assert kernel.launches == {"compiled": 3, "cached": 4}


def _param(name, default=inspect.Parameter.empty):
    """A stand-in for Triton's ``KernelParam`` (name, has_default, default)."""
    return types.SimpleNamespace(
        name=name, default=default, has_default=default is not inspect.Parameter.empty
    )


def test_a_kernels_defaulted_parameters_reach_the_cached_launch(fake_cuda):
    """Triton's compiled launcher takes every parameter, where the JIT call fills defaults: a
    kernel with trailing defaulted constexprs the launch does not give (an experiment's variant
    switch) gets their defaults on cached launches too; a missing parameter without one is
    refused by name."""
    events = []
    fake = _FakeJit(events)
    passed = [_param(f"p{i}") for i in range(6)]
    fake.params = [*passed, _param("SYNC", "all"), _param("AHEAD", 2)]
    kernel = fake_cuda.CachedKernel(fake)
    for _ in range(2):
        kernel.launch((2,), (_BASE, _BASE, 4, 64), (), (32, 128), 4, 1, 0)
    assert [e[0] for e in events] == ["compile", "run"]
    assert events[1][1][-2:] == ("all", 2)  # the cached run: the defaults last
    fake.params = [*passed, _param("SYNC", "all"), _param("MORE")]
    kernel = fake_cuda.CachedKernel(fake)
    with pytest.raises(TypeError, match="gives no value for MORE"):
        kernel.launch((2,), (_BASE, _BASE, 4, 64), (), (32, 128), 4, 1, 0)


@settings(max_examples=200, derandomize=True)
@given(ints=st.lists(INTS, min_size=0, max_size=6))
def test_the_int_class_table_answers_what_spec_does(ints):
    from rmsnorm_kernel import launch

    assert launch._int_classes(tuple(ints)) == tuple(_spec(a) for a in ints)
    assert launch._int_classes(tuple(ints)) == tuple(_spec(a) for a in ints)  # from the table


def test_the_int_class_table_is_bounded(monkeypatch):
    from rmsnorm_kernel import launch

    monkeypatch.setattr(launch, "MAX_INT_CLASSES", 8)
    monkeypatch.setattr(launch, "_INT_CLASSES", {})
    for a in range(100):
        assert launch._int_classes((a, a + 1)) == (_spec(a), _spec(a + 1))
        assert len(launch._INT_CLASSES) <= 8 + 2


def test_keys_separate_alignment_dtype_and_consts(fake_cuda):
    kernel = fake_cuda.CachedKernel(_FakeJit([]))
    args = (_BASE, _BASE, 4, 64)
    base = kernel.key(args, (32, 128), 4, 1, 0)
    assert kernel.key(args, (32, 128), 4, 1, 0) == base
    assert kernel.key((_BASE[1:], _BASE, 4, 64), (32, 128), 4, 1, 0) != base  # 4-byte offset
    assert kernel.key((_BASE[4:], _BASE, 4, 64), (32, 128), 4, 1, 0) == base  # 16-byte offset
    assert kernel.key((_BASE.double(), _BASE, 4, 64), (32, 128), 4, 1, 0) != base
    assert kernel.key(args, (32, 64), 4, 1, 0) != base
    assert kernel.key(args, (32, 128), 8, 1, 0) != base
    assert kernel.key(args, (32, 128), 4, 1, 1) != base  # another device


def test_a_launcher_changing_an_arguments_kind_is_refused(fake_cuda):
    kernel = fake_cuda.CachedKernel(_FakeJit([]))
    kernel.launch((2,), (_BASE, _BASE, 4, 64), (), (32, 128), 4, 1, 0)
    with pytest.raises(TypeError, match="other kinds of arguments"):
        kernel.launch((2,), (_BASE, _BASE, _BASE, 64), (), (32, 128), 4, 1, 0)


def test_the_handle_table_is_bounded(fake_cuda, monkeypatch):
    monkeypatch.setattr(fake_cuda, "MAX_HANDLES", 3)
    events = []
    kernel = fake_cuda.CachedKernel(_FakeJit(events))
    for warps in (1, 2, 4, 8, 16, 32):  # num_warps is in the key: six handles
        kernel.launch((2,), (_BASE, _BASE, 4, 64), (), (32, 128), warps, 1, 0)
        assert len(kernel.handles) <= 3
    kernel.launch((2,), (_BASE, _BASE, 4, 64), (), (32, 128), 32, 1, 0)  # still there: a hit
    assert events[-1][0] == "run"


def test_a_cached_launch_passes_addresses_where_the_args_are_tensors_then_ints(fake_cuda):
    """Triton's launcher takes an int pointer as it is (a tensor costs it a ``data_ptr()`` call
    and a ``cuPointerGetAttribute``): the cached path hands it the addresses it keyed on."""
    events = []
    kernel = fake_cuda.CachedKernel(_FakeJit(events))
    a, b = torch.zeros(64), torch.zeros(32)
    for _ in range(2):
        kernel.launch((2,), (a, b, 4, 64), (), (32, 128), 4, 1, 0)
    assert [e[0] for e in events] == ["compile", "run"]
    assert events[0][1][:2] == (a, b)  # the compile sees the tensors themselves
    assert events[1][1] == (a.data_ptr(), b.data_ptr(), 4, 64, 32, 128)


def test_a_layout_with_a_descriptor_keeps_its_args():
    from triton.tools.tensor_descriptor import TensorDescriptor

    from rmsnorm_kernel.launch import _Layout

    t = torch.zeros(8, 64)
    desc = TensorDescriptor(t, [8, 64], [64, 1], [2, 64])
    assert _Layout((t, t, 4, 64)).direct
    assert not _Layout((desc, t, 4, 64)).direct
    assert not _Layout((t, 4, t, 64)).direct  # an int before a tensor: positions would move


def test_a_copy_on_write_snapshot_keeps_the_exact_layout():
    """``launch.without_cow`` replaces a lazily cloned tensor by a copy with its sizes, strides
    and storage offset (the kernels get strides apart from the tensor), reads only the span the
    tensor covers, leaves the original lazy, and passes every other argument through as is."""
    from rmsnorm_kernel.launch import without_cow

    base = torch.randn(10, 30)
    views = [
        base[2:8:2, 3:23],  # an offset and a row stride
        base.expand(2, 10, 30)[:, :, ::3],  # stride 0
        torch.randn(7).view(torch.uint8)[1:],  # another dtype than the storage was made with
    ]
    for view in views:
        lazy = torch._lazy_clone(view)
        plain = torch.randn(3)
        args = (lazy, 5, plain)
        got = without_cow(args)
        snap = got[0]
        assert torch._C._is_cow_tensor(lazy) and not torch._C._is_cow_tensor(snap)
        assert (snap.shape, snap.stride(), snap.storage_offset()) == (
            view.shape,
            view.stride(),
            view.storage_offset(),
        )
        assert torch.equal(snap, view) and got[1:] == (5, plain) and got[2] is plain
    untouched = (torch.randn(2), 3)
    assert without_cow(untouched) is untouched


def test_readable_copies_a_copy_on_write_input_only_where_torch_has_no_read_only_address(
    monkeypatch, device
):
    """torch 2.11 has no ``const_data_ptr``: every address read materialises a lazily cloned
    tensor, so there (``COPY_COW_INPUTS``) ``readable`` swaps it for a snapshot (same layout and
    values, the caller's tensor still lazy); elsewhere, and for other tensors, it returns its
    argument itself. The launchers then give the same bits with the swap as without it."""
    import rmsnorm_kernel as rk
    from rmsnorm_kernel import launch, ops

    base = torch.randn(6, 40, device=device)
    view = base[1:5, 4:36]
    lazy = torch._lazy_clone(view)
    monkeypatch.setattr(launch, "COPY_COW_INPUTS", False)
    assert launch.readable(lazy) is lazy and launch.readable(None) is None
    monkeypatch.setattr(launch, "COPY_COW_INPUTS", True)
    monkeypatch.setattr(ops, "COPY_COW_INPUTS", True)
    snap = launch.readable(lazy)
    assert torch._C._is_cow_tensor(lazy) and not torch._C._is_cow_tensor(snap)
    assert (snap.shape, snap.stride(), snap.storage_offset()) == (
        view.shape,
        view.stride(),
        view.storage_offset(),
    )
    # (not view: a lazy clone makes its source copy-on-write too)
    plain = torch.randn(3, device=device)
    assert torch.equal(snap, view) and launch.readable(plain) is plain
    w = torch.randn(32, device=device)
    lazy_w = torch._lazy_clone(w)
    y, _, rstd = ops.launch_forward(lazy, lazy_w, None, 1e-6, 0.0, view.dtype)
    dy = torch.randn(4, 32, device=device)
    lazy_dy = torch._lazy_clone(dy)
    dx, dw = ops.launch_backward(lazy_dy, lazy, lazy_w, rstd, 0.0, None, view.dtype)
    assert all(torch._C._is_cow_tensor(t) for t in (lazy, lazy_w, lazy_dy))
    want_y = rk.rmsnorm(view, w, 1e-6)
    want_dx, want_dw = ops.launch_backward(dy, view, w, rstd, 0.0, None, view.dtype)
    assert torch.equal(y, want_y) and torch.equal(dx, want_dx) and torch.equal(dw, want_dw)


class _FakeClusterJit(_FakeJit):
    """``_FakeJit`` with ``warmup``: a compile that launches nothing, whose handle's packed launch
    metadata is ``packed`` (Triton's NVIDIA backend: ``(num_warps, num_ctas, shared)``)."""

    def __init__(self, events, packed=(4, 1, 0)):
        super().__init__(events)
        self.packed = packed

    def warmup(self, *args, grid, **kwargs):
        events, packed = self.events, self.packed
        events.append(("warmup", grid, kwargs.get("num_ctas", 1)))

        class Compiled:
            function, packed_metadata = "f", packed

            @staticmethod
            def _init_handles():
                events.append(("init",))

            @staticmethod
            def run(*params):
                events.append(("run", params[:6], params[9:]))

        return Compiled


def test_a_cluster_launch_compiles_one_cta_and_launches_clusters(fake_cuda):
    """``CachedKernel(cluster=True)``: the first launch of a key compiles for one CTA without
    launching (a launch before the metadata is patched would run unclustered), then every launch,
    the first included, goes through the launcher with ``num_ctas`` patched into the packed
    metadata (which sets the cluster size and multiplies the grid by it); one CTA a cluster is an
    ordinary launch."""
    events = []
    kernel = fake_cuda.CachedKernel(_FakeClusterJit(events), cluster=True)
    a, b = torch.zeros(64), torch.zeros(32)
    for _ in range(2):
        kernel.launch((5,), (a, b, 4, 64), (), (32, 128), 8, 1, 0, 4)
    assert [e[0] for e in events] == ["warmup", "init", "run", "run"]
    assert events[0][1:] == ((5,), 1)  # compiled for one CTA, on the caller's grid
    for _, params, rest in events[2:]:
        assert params[:3] == (5, 1, 1) and params[3] == 7  # the grid in clusters, the stream
        assert params[5] == (4, 4, 0)  # (num_warps, num_ctas, shared): 4 CTAs a cluster
        assert rest == (a.data_ptr(), b.data_ptr(), 4, 64, 32, 128)
    assert kernel.launches == {"compiled": 1, "cached": 2}
    events.clear()
    kernel.launch((5,), (a, b, 4, 64), (), (32, 128), 8, 1, 0, 1)  # one CTA: [grid](...)
    assert [e[0] for e in events] == ["compile"]


def test_a_cluster_launch_refuses_metadata_it_cannot_patch(fake_cuda):
    """A Triton that packs its launch metadata otherwise (or already clusters the kernel) is
    refused by name rather than launched unclustered."""
    for packed in ((4, 2, 0), (4, 1, 0, 0)):
        kernel = fake_cuda.CachedKernel(_FakeClusterJit([], packed), cluster=True)
        with pytest.raises(RuntimeError, match="cluster launch cannot be made"):
            kernel.launch((5,), (torch.zeros(4), torch.zeros(4), 4, 64), (), (32, 128), 8, 1, 0, 4)
