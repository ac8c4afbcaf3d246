"""The fast path's VCRC (roce/_crc32.c's reflected CRC-16, carry-less-multiply folding and
slice-by-8) against the table-driven reference, ``roce.families.ib.crc.vcrc``."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.families.ib import crc as ibcrc

_ext = fast._ext
pytestmark = pytest.mark.skipif(_ext is None, reason="compiled fast path not built")

KERNELS = ("vpclmulqdq-avx512", "pclmulqdq-sse4", "slice-by-8")


@pytest.fixture(params=KERNELS)
def kernel(request):
    _ext.vcrc_force(request.param)
    try:
        if _ext.vcrc_impl() != request.param:
            pytest.skip(f"this CPU cannot run the {request.param} kernel")
        yield request.param
    finally:
        _ext.vcrc_force(None)


def test_vcrc_kernel_lengths_and_alignments(kernel: str) -> None:
    rng = random.Random(kernel)
    # every length through the kernels' thresholds (32 bytes: one lane; 64: four lanes; 256:
    # four 512-bit lanes) and past them, at every alignment mod 4, and packet sizes
    for n in [*range(0, 300), *range(500, 530), 767, 768, 1023, 1024, 1025, 1279, 2047,
              2048, 2049, 4095, 4096, 4097, 4126, 9000, 65536 + 13]:
        off = n % 4
        buf = rng.randbytes(n + off)
        data = memoryview(buf)[off:]
        assert _ext.ib_vcrc(data) == ibcrc.vcrc(data), (kernel, n, off)
    assert _ext.vcrc_impl() == kernel


@given(st.binary(max_size=5000))
def test_vcrc_all_kernels_equal_the_table(data: bytes) -> None:
    want = ibcrc.vcrc(data)
    try:
        for name in KERNELS:
            _ext.vcrc_force(name)
            if _ext.vcrc_impl() == name:
                assert _ext.ib_vcrc(data) == want, name
    finally:
        _ext.vcrc_force(None)


@given(st.integers(0, 0xFFFF), st.integers(1, 200))
def test_vcrc_constant_runs(byte_pair: int, count: int) -> None:
    """Runs of one repeated byte pair (zeros and ones among them: the folds' constants act
    alone on them)."""
    data = byte_pair.to_bytes(2, "big") * count
    try:
        for name in KERNELS:
            _ext.vcrc_force(name)
            assert _ext.ib_vcrc(data) == ibcrc.vcrc(data), name
    finally:
        _ext.vcrc_force(None)


def test_vcrc_kernel_choice() -> None:
    _ext.vcrc_force(None)
    auto = _ext.vcrc_impl()
    assert auto in KERNELS
    try:
        _ext.vcrc_force("no-such-kernel")  # ignored
        assert _ext.vcrc_impl() == auto
        _ext.vcrc_force("slice-by-8")
        assert _ext.vcrc_impl() == "slice-by-8"
    finally:
        _ext.vcrc_force(None)
    assert _ext.vcrc_impl() == auto
    # what the emulator and the link packets compute per packet is this kernel
    assert ibcrc.vcrc_fast is _ext.ib_vcrc
