"""Ascend storage formats: round trips, index-formula oracles, inference, errors, and CANN's msaccucmp."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from msaccucmp_oracle import load_msaccucmp

from nbprec.errors import NbprecError
from nbprec.formats.storage import (
    FORMAT_IDS,
    StorageFormatError,
    format_id,
    format_name,
    from_origin,
    resolve_origin_format,
    storage_shape,
    to_origin,
)

DTYPES = [
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(np.int8),
]
UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

# (storage format, origin format, origin shape): padding in C and N, H=W=1, batch dims, rank 1, exact fits.
ROUND_TRIPS = [
    ("NC1HWC0", "NCHW", (2, 19, 3, 4)),
    ("NC1HWC0", "NHWC", (2, 3, 4, 19)),
    ("NC1HWC0", "HWCN", (3, 4, 19, 2)),
    ("NC1HWC0", "CHWN", (19, 3, 4, 2)),
    ("NC1HWC0", "NCHW", (3, 64, 1, 1)),
    ("NC1HWC0", "NC", (5, 40)),
    ("FRACTAL_Z", "NCHW", (17, 19, 3, 3)),
    ("FRACTAL_Z", "HWCN", (3, 3, 19, 17)),
    ("FRACTAL_Z", "NHWC", (17, 2, 3, 33)),
    ("FRACTAL_Z", "CHWN", (19, 1, 2, 40)),
    ("FRACTAL_Z", "NCHW", (32, 64, 1, 1)),
    ("FRACTAL_Z", "NC", (33, 20)),
    ("NDC1HWC0", "NCDHW", (2, 19, 3, 2, 2)),
    ("NDC1HWC0", "NDHWC", (2, 3, 2, 2, 19)),
    ("NDC1HWC0", "DHWCN", (3, 2, 2, 19, 2)),
    ("FRACTAL_Z_3D", "NCDHW", (17, 5, 2, 2, 3)),
    ("FRACTAL_Z_3D", "NDHWC", (17, 2, 2, 3, 5)),
    ("FRACTAL_Z_3D", "DHWCN", (2, 2, 3, 5, 17)),
    ("FRACTAL_NZ", "ND", (33, 17)),
    ("FRACTAL_NZ", "ND", (5,)),
    ("FRACTAL_NZ", "ND", (1, 1)),
    ("FRACTAL_NZ", "ND", (2, 3, 20, 40)),
    ("FRACTAL_NZ", "NC", (32, 64)),
    ("NHWC", "NCHW", (2, 3, 4, 5)),
    ("HWCN", "NHWC", (2, 4, 5, 3)),
    ("NCDHW", "DHWCN", (2, 3, 4, 5, 6)),
    ("ND", "ND", (7, 3)),
]


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of ``a`` (NaN payloads and signed zeros compare exactly)."""
    return np.ascontiguousarray(a).view(UINTS[a.dtype.itemsize])


def random_array(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """Random bit patterns of ``dtype`` (every value distinct enough to catch a misplaced element)."""
    raw = np.random.default_rng(seed).integers(0, 1 << (8 * dtype.itemsize), size=shape, dtype=np.uint64)
    return raw.astype(UINTS[dtype.itemsize]).view(dtype)


def garbage(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A storage buffer filled with a non-zero pattern (0x5A bytes), so unsliced padding shows up."""
    return np.full(shape, 0x5A5A5A5A5A5A5A5A & ((1 << (8 * dtype.itemsize)) - 1), UINTS[dtype.itemsize]).view(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("storage_fmt", "origin_fmt", "shape"), ROUND_TRIPS)
def test_round_trip_is_bit_exact(storage_fmt, origin_fmt, shape, dtype):
    x = random_array(shape, dtype)
    stored = from_origin(x, storage_fmt, origin_fmt)
    expected_shape = storage_shape(shape, storage_fmt, origin_fmt, itemsize=dtype.itemsize)
    assert stored.shape == expected_shape
    assert stored.dtype == dtype
    back = to_origin(stored.ravel(), storage_fmt, stored.shape, shape, origin_fmt)
    assert back.dtype == dtype
    assert back.shape == shape
    assert np.array_equal(bits(back), bits(x))
    # the padding from_origin writes is zero: the kept elements are all there is of non-zero bits
    assert np.count_nonzero(bits(stored)) == np.count_nonzero(bits(x))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)], ids=str)
@pytest.mark.parametrize(("c0", "ni"), [(8, 16), (16, 4), (4, 32)])
def test_round_trip_with_other_block_sizes(c0, ni, dtype):
    for fmt, layout, shape in [("FRACTAL_Z", "HWCN", (3, 3, 19, 17)), ("FRACTAL_NZ", "ND", (2, 33, 17))]:
        x = random_array(shape, dtype, seed=3)
        stored = from_origin(x, fmt, layout, c0=c0, ni=ni)
        assert stored.shape[-1] == c0 and stored.shape[-2] == ni
        assert np.array_equal(bits(to_origin(stored, fmt, stored.shape, shape, layout)), bits(x))


def test_storage_shape_uses_c0_32_for_one_byte_dtypes():
    assert storage_shape((2, 40, 3, 3), "NC1HWC0", "NCHW", itemsize=1) == (2, 2, 3, 3, 32)
    assert storage_shape((2, 40, 3, 3), "NC1HWC0", "NCHW", itemsize=2) == (2, 3, 3, 3, 16)
    assert storage_shape((3, 3, 20, 40), "FRACTAL_Z", "HWCN", itemsize=4) == (18, 3, 16, 16)
    assert storage_shape((4, 100, 30), "FRACTAL_NZ", "ND", itemsize=1) == (4, 1, 7, 16, 32)
    assert storage_shape((30,), "FRACTAL_NZ", None, itemsize=2) == (2, 1, 16, 16)
    assert storage_shape((2, 3, 4, 5), "NHWC", "NCHW", itemsize=4) == (2, 4, 5, 3)
    assert from_origin(np.ones((1, 40, 1, 1), np.int8), "NC1HWC0", "NCHW").shape == (1, 2, 1, 1, 32)


# --- oracles: storage arrays built element by element from the index formulas, with garbage padding ---


def oracle_nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    storage = garbage((n_, -(-c_ // c0), h_, w_, c0), x.dtype)
    for n, c, h, w in itertools.product(range(n_), range(c_), range(h_), range(w_)):
        storage[n, c // c0, h, w, c % c0] = x[n, c, h, w]
    return storage


def oracle_fractal_z(w_nchw: np.ndarray, c0: int, ni: int, extra_blocks: int = 0) -> np.ndarray:
    n_, c_, h_, w_ = w_nchw.shape
    c1, no = -(-c_ // c0) + extra_blocks, -(-n_ // ni) + extra_blocks
    storage = garbage((c1 * h_ * w_, no, ni, c0), w_nchw.dtype)
    for n, c, h, w in itertools.product(range(n_), range(c_), range(h_), range(w_)):
        storage[(c // c0) * h_ * w_ + h * w_ + w, n // ni, n % ni, c % c0] = w_nchw[n, c, h, w]
    return storage


def oracle_fractal_nz(x: np.ndarray, c0: int, ni: int) -> np.ndarray:
    *batch, n_, c_ = x.shape
    flat = x.reshape(-1, n_, c_)
    storage = garbage((flat.shape[0], -(-c_ // c0), -(-n_ // ni), ni, c0), x.dtype)
    for b, n, c in itertools.product(range(flat.shape[0]), range(n_), range(c_)):
        storage[b, c // c0, n // ni, n % ni, c % c0] = flat[b, n, c]
    return storage.reshape(*batch, *storage.shape[1:])


def oracle_ndc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n_, c_, d_, h_, w_ = x.shape
    storage = garbage((n_, d_, -(-c_ // c0), h_, w_, c0), x.dtype)
    for n, c, d, h, w in itertools.product(*map(range, x.shape)):
        storage[n, d, c // c0, h, w, c % c0] = x[n, c, d, h, w]
    return storage


def oracle_fractal_z_3d(x: np.ndarray, c0: int, ni: int) -> np.ndarray:
    n_, c_, d_, h_, w_ = x.shape
    c1 = -(-c_ // c0)
    storage = garbage((d_ * c1 * h_ * w_, -(-n_ // ni), ni, c0), x.dtype)
    for n, c, d, h, w in itertools.product(*map(range, x.shape)):
        storage[((d * c1 + c // c0) * h_ + h) * w_ + w, n // ni, n % ni, c % c0] = x[n, c, d, h, w]
    return storage


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nc1hwc0_matches_the_index_formula(dtype):
    x = random_array((2, 19, 3, 2), dtype, seed=1)
    storage = oracle_nc1hwc0(x, c0=16)
    flat = storage.ravel()
    assert np.array_equal(bits(to_origin(flat, "NC1HWC0", storage.shape, x.shape, "NCHW")), bits(x))
    nhwc, hwcn = x.transpose(0, 2, 3, 1), x.transpose(2, 3, 1, 0)
    assert np.array_equal(bits(to_origin(flat, "NC1HWC0", storage.shape, nhwc.shape, "NHWC")), bits(nhwc))
    assert np.array_equal(bits(to_origin(flat, 3, storage.shape, hwcn.shape, "FORMAT_HWCN")), bits(hwcn))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fractal_z_matches_the_index_formula(dtype):
    w = random_array((17, 19, 2, 3), dtype, seed=2)
    storage = oracle_fractal_z(w, c0=16, ni=16)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, w.shape, "NCHW")), bits(w))
    hwcn = w.transpose(2, 3, 1, 0)  # a TensorFlow conv weight
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, hwcn.shape, "HWCN")), bits(hwcn))
    nhwc = w.transpose(0, 2, 3, 1)
    assert np.array_equal(bits(to_origin(storage, 4, storage.shape, nhwc.shape, "NHWC")), bits(nhwc))


def test_fractal_z_with_more_padding_blocks_than_needed():
    w = random_array((5, 3, 2, 2), np.dtype(np.float16), seed=5)
    storage = oracle_fractal_z(w, c0=16, ni=16, extra_blocks=1)  # C1=2 and No=2 where 1 would do
    assert storage.shape == (8, 2, 16, 16)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, w.shape, "NCHW")), bits(w))


def test_fractal_z_two_dimensional_matmul_weight():
    w = random_array((33, 20), np.dtype(np.float16), seed=6)
    storage = oracle_fractal_z(w.reshape(33, 20, 1, 1), c0=16, ni=16)
    assert storage.shape == (2, 3, 16, 16)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, w.shape, "ND")), bits(w))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 20, 33), (33, 17), (5,), (4, 16, 32)])
def test_fractal_nz_matches_the_index_formula(shape, dtype):
    x = random_array(shape, dtype, seed=4)
    storage = oracle_fractal_nz(x.reshape(1, x.size) if x.ndim == 1 else x, c0=16, ni=16)
    back = to_origin(storage.ravel(), "FRACTAL_NZ", storage.shape, shape, "ND")
    assert np.array_equal(bits(back), bits(x))


def test_ndc1hwc0_and_fractal_z_3d_match_the_index_formula():
    x = random_array((2, 19, 2, 3, 2), np.dtype(np.float16), seed=7)
    storage = oracle_ndc1hwc0(x, c0=16)
    assert np.array_equal(bits(to_origin(storage, "NDC1HWC0", storage.shape, x.shape, "NCDHW")), bits(x))
    ndhwc = x.transpose(0, 2, 3, 4, 1)
    assert np.array_equal(bits(to_origin(storage, 32, storage.shape, ndhwc.shape, "NDHWC")), bits(ndhwc))
    w = random_array((17, 19, 2, 2, 3), np.dtype(np.float32), seed=8)
    storage = oracle_fractal_z_3d(w, c0=16, ni=16)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z_3D", storage.shape, w.shape, "NCDHW")), bits(w))
    dhwcn = w.transpose(2, 3, 4, 1, 0)
    assert np.array_equal(bits(to_origin(storage, 33, storage.shape, dhwcn.shape, "DHWCN")), bits(dhwcn))


def test_result_is_a_fresh_contiguous_array():
    storage = oracle_nc1hwc0(random_array((2, 19, 3, 2), np.dtype(np.float32)), c0=16)
    storage.flags.writeable = False  # a read-only payload (a memory map) is fine
    out = to_origin(storage, "NC1HWC0", storage.shape, (2, 19, 3, 2), "NCHW")
    assert out.flags.c_contiguous and out.flags.writeable
    assert not np.shares_memory(out, storage)


@pytest.mark.parametrize("kind", ["object", "big-endian", "strided input"])
def test_any_array_converts_as_its_values_do(kind):
    # the copies work on whole C0 runs over the raw buffers; arrays that have none (objects), other byte
    # orders and views that are not contiguous go through too, value for value
    for fmt, layout, shape in [("FRACTAL_NZ", "ND", (2, 33, 17)), ("NC1HWC0", "NHWC", (2, 3, 5, 19))]:
        x = np.random.default_rng(9).standard_normal(shape)
        if kind == "object":
            x = x.astype(object)
        elif kind == "big-endian":
            x = x.astype(">f8")
        stored = from_origin(x, fmt, layout)
        assert stored.dtype == x.dtype
        data = np.repeat(stored.ravel(), 2)[::2] if kind == "strided input" else stored.ravel()
        back = to_origin(data, fmt, stored.shape, shape, layout)
        assert back.dtype == x.dtype and back.shape == shape
        assert (back == x).all()
        assert (to_origin(stored.astype(np.float64).ravel(), fmt, stored.shape, shape, layout) == x).all()


def test_empty_tensors():
    assert to_origin(np.empty(0, np.float16), "FRACTAL_NZ", (0, 1, 16, 16), (5, 0), "ND").shape == (5, 0)
    assert from_origin(np.empty((0, 3, 2, 2), np.float16), "NC1HWC0", "NCHW").shape == (0, 1, 2, 2, 16)
    assert to_origin(np.empty(0, np.int8), "FRACTAL_Z", (0, 1, 16, 32), (2, 3, 0, 0), "NCHW").shape == (2, 3, 0, 0)
    assert from_origin(np.empty((2, 3, 0, 0), np.int8), "FRACTAL_Z", "NCHW").shape == (0, 1, 16, 32)


# --- inference of the origin format ---


def test_inference_tells_nchw_from_nhwc_for_nc1hwc0():
    x = random_array((2, 19, 3, 5), np.dtype(np.float16))
    storage = oracle_nc1hwc0(x, c0=16)
    assert np.array_equal(bits(to_origin(storage, "NC1HWC0", storage.shape, x.shape)), bits(x))
    nhwc = x.transpose(0, 2, 3, 1)
    assert np.array_equal(bits(to_origin(storage, "NC1HWC0", storage.shape, nhwc.shape, "")), bits(nhwc))
    hwcn = x.transpose(2, 3, 1, 0)
    assert np.array_equal(bits(to_origin(storage, "NC1HWC0", storage.shape, hwcn.shape, "ND")), bits(hwcn))


def test_inference_prefers_nchw_when_ambiguous():
    x = random_array((2, 2, 2, 2), np.dtype(np.float32))  # (N, C, H, W) and (N, H, W, C) both fit
    storage = oracle_nc1hwc0(x, c0=16)
    assert np.array_equal(bits(to_origin(storage, "NC1HWC0", storage.shape, (2, 2, 2, 2))), bits(x))


def test_inference_finds_hwcn_tensorflow_conv_weights_in_fractal_z():
    w = random_array((32, 20, 3, 3), np.dtype(np.float16))
    storage = oracle_fractal_z(w, c0=16, ni=16)
    hwcn = w.transpose(2, 3, 1, 0)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, hwcn.shape)), bits(hwcn))


def test_inference_prefers_the_layout_with_minimal_padding():
    # storage (C1*H*W=2, No=1, 16, 16) and origin (2, 1, 1, 1): as NCHW it would be N=2, C=1 with C1=2 (one
    # block of pure padding); as HWCN it is H=2, W=1, C=1, N=1 with C1=1, the layout a writer makes
    w_hwcn = random_array((2, 1, 1, 1), np.dtype(np.float16))
    storage = oracle_fractal_z(w_hwcn.transpose(3, 2, 0, 1), c0=16, ni=16)
    assert storage.shape == (2, 1, 16, 16)
    assert np.array_equal(bits(to_origin(storage, "FRACTAL_Z", storage.shape, (2, 1, 1, 1))), bits(w_hwcn))
    as_nchw = to_origin(storage, "FRACTAL_Z", storage.shape, (2, 1, 1, 1), "NCHW")  # explicit: no inference
    assert bits(as_nchw)[0, 0, 0, 0] == bits(w_hwcn)[0, 0, 0, 0]  # N=0 is (h=0, n=0)
    assert bits(as_nchw)[1, 0, 0, 0] == 0x5A5A  # N=1 lands in the padding of the Ni block


def test_resolve_origin_format_names_the_layout_to_origin_uses():
    cases = [
        ("FRACTAL_Z", (18, 3, 16, 16), (3, 3, 20, 40), None, "HWCN"),
        ("FRACTAL_Z", (18, 3, 16, 16), (40, 20, 3, 3), "", "NCHW"),
        ("FRACTAL_Z", (2, 3, 16, 16), (33, 20), "ND", "NC"),
        ("NC1HWC0", (2, 2, 3, 5, 16), (2, 3, 5, 19), "ND", "NHWC"),
        ("NDC1HWC0", (2, 3, 2, 4, 5, 16), (2, 3, 4, 5, 19), None, "NDHWC"),
        ("FRACTAL_NZ", (4, 2, 3, 16, 16), (4, 40, 20), "NCHW", "ND"),
        ("NHWC", (2, 4, 5, 3), (2, 3, 4, 5), None, "NCHW"),
        ("NHWC", (2, 4, 5, 3), (2, 4, 5, 3), None, "NHWC"),
        ("NHWC", (2, 4, 5, 3), (8, 15), "ND", "ND"),
        (1, (2, 4, 5, 3), (4, 5, 3, 2), None, "HWCN"),
    ]
    for fmt, sshape, oshape, ofmt, expected in cases:
        assert resolve_origin_format(fmt, sshape, oshape, ofmt) == expected
        data = random_array((int(np.prod(sshape)),), np.dtype(np.float16))
        inferred = to_origin(data, fmt, sshape, oshape, ofmt)
        assert np.array_equal(bits(to_origin(data, fmt, sshape, oshape, expected)), bits(inferred))
    with pytest.raises(StorageFormatError, match="NC1HWC0"):
        resolve_origin_format("NC1HWC0", (2, 2, 3, 5, 16), (2, 40, 3, 5))


def test_inference_for_plain_layouts():
    x = random_array((2, 3, 4, 5), np.dtype(np.float32))
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    assert np.array_equal(to_origin(nhwc.ravel(), "NHWC", nhwc.shape, x.shape), x)  # a transpose to NCHW
    assert np.array_equal(to_origin(nhwc.ravel(), "NHWC", nhwc.shape, nhwc.shape), nhwc)  # same shape
    assert np.array_equal(to_origin(nhwc, "NHWC", nhwc.shape, (2, 60), "ND"), nhwc.reshape(2, 60))
    assert np.array_equal(to_origin(x.ravel(), "ND", x.shape, (6, 20)), x.reshape(6, 20))


# --- format ids and names ---


def test_format_names_and_ids():
    assert FORMAT_IDS["NC1HWC0"] == 3 and FORMAT_IDS["FRACTAL_NZ"] == 29 and FORMAT_IDS["NC"] == 35
    for name, number in FORMAT_IDS.items():
        assert format_name(number) == name and format_id(name) == number
    assert format_name(57) == "FORMAT_57" and format_name("FORMAT_57") == "FORMAT_57"
    assert format_name(np.uint32(33)) == "FRACTAL_Z_3D"
    assert format_name("format_fractal_z") == "FRACTAL_Z"
    assert format_id("FORMAT_NDC1HWC0") == 32 and format_id("FORMAT_57") == 57
    with pytest.raises(TypeError):
        FORMAT_IDS["NEW"] = 1  # type: ignore[index]
    with pytest.raises(StorageFormatError, match="FRACTAL_ZZ"):
        format_id("FRACTAL_ZZ")


# --- errors ---

ERRORS = [
    # (storage format, storage shape, data size, origin shape, origin format, words the message must hold)
    ("NC1HWC0", (2, 2, 3, 3, 16), 100, (2, 19, 3, 3), "NCHW", ["NC1HWC0", "100", "576"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 33, 3, 3), "NCHW", ["NC1HWC0", "C=33", "C1*C0"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 19, 3, 4), "NCHW", ["NC1HWC0", "W=4"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 19, 3), "NCHW", ["NC1HWC0", "rank"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 19, 3, 3, 1), "NCDHW", ["NC1HWC0", "NCDHW", "supported"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 19, 3, 4), None, ["NC1HWC0", "NCHW", "NHWC", "HWCN"]),
    ("NC1HWC0", (2, 2, 3, 3, 16), None, (2, 19, 9), None, ["NC1HWC0", "no origin format fits", "rank 4 or 2"]),
    ("NC1HWC0", (2, 2, 3, 16), None, (2, 19, 3, 1), "NCHW", ["NC1HWC0", "storage rank"]),
    ("FRACTAL_Z", (9, 1, 16, 16), None, (17, 3, 3, 3), "NCHW", ["FRACTAL_Z", "N=17", "No*Ni"]),
    ("FRACTAL_Z", (10, 1, 16, 16), None, (16, 3, 3, 3), "NCHW", ["FRACTAL_Z", "C1*H*W=10", "H*W=9"]),
    ("FRACTAL_NZ", (2, 2, 2, 16, 16), None, (3, 20, 30), "ND", ["FRACTAL_NZ", "batch", "3"]),
    ("FRACTAL_NZ", (2, 2, 16, 16), None, (40, 20), "ND", ["FRACTAL_NZ", "N=40"]),
    ("FRACTAL_NZ", (2, 16, 16), None, (16, 16), "ND", ["FRACTAL_NZ", "rank"]),
    ("FRACTAL_NZ", (1, 1, 16, 16), None, (), "ND", ["FRACTAL_NZ", "scalar"]),
    ("FRACTAL_NZ", (1, 1, 16, 16), None, (16, 16), "NC1HWC0", ["FRACTAL_NZ", "NC1HWC0"]),
    ("NDC1HWC0", (2, 3, 2, 4, 4, 16), None, (2, 3, 2, 4, 4), "NCDHW", ["NDC1HWC0", "D=2", "has 3"]),
    ("FRACTAL_ZN_LSTM", (4, 4), None, (4, 4), "ND", ["FRACTAL_ZN_LSTM", "supported", "NC1HWC0"]),
    (40, (4, 4), None, (4, 4), "ND", ["RESERVED", "supported"]),
    (77, (4, 4), None, (4, 4), "ND", ["FORMAT_77"]),
    ("NHWC", (2, 4, 5, 3), None, (2, 3, 5, 4), "NCHW", ["NHWC", "(2, 3, 4, 5)"]),
    ("NHWC", (2, 4, 5, 3), None, (2, 3, 4, 5, 1), "NCDHW", ["NHWC", "NCDHW", "transposes"]),
    ("NHWC", (2, 4, 5, 3), None, (2, 60, 1, 1), None, ["NHWC", 'origin_format="ND"']),
    ("ND", (2, 4), None, (3, 3), None, ["ND", "9 elements"]),
    ("NCHW", (2, -4), None, (3, 3), None, ["NCHW", "negative"]),
    ("NCHW", (2, 3, 4, 5), None, (2, 3, 4, 5), "FRACTAL_Z", ["NCHW", "FRACTAL_Z", "supported: NCHW, NHWC"]),
]


@pytest.mark.parametrize(("fmt", "sshape", "size", "oshape", "ofmt", "words"), ERRORS)
def test_errors_name_the_format_and_the_misfit(fmt, sshape, size, oshape, ofmt, words):
    n = size if size is not None else int(np.prod([max(d, 0) for d in sshape]))
    data = np.arange(n, dtype=np.float16)
    with pytest.raises(StorageFormatError) as info:
        to_origin(data, fmt, sshape, oshape, ofmt)
    assert isinstance(info.value, NbprecError)
    for word in words:
        assert word in str(info.value)


def test_writer_errors():
    with pytest.raises(StorageFormatError, match=r"NC1HWC0.*NCDHW"):
        from_origin(np.zeros((2, 3, 4, 5, 6)), "NC1HWC0", "NCDHW")
    with pytest.raises(StorageFormatError, match=r"FRACTAL_Z.*c0=0"):
        storage_shape((2, 3, 4, 5), "FRACTAL_Z", "NCHW", itemsize=2, c0=0)
    with pytest.raises(StorageFormatError, match="FORMAT_77"):
        from_origin(np.zeros((2, 3)), 77, "ND")
    with pytest.raises(StorageFormatError, match=r"NCHW.*NCDHW"):
        from_origin(np.zeros((2, 3, 4, 5)), "NCDHW", "NCHW")


# --- CANN's own converters (msaccucmp, in the PyPI package mindstudio-probe) as an oracle ---

MSACCUCMP_CONVERTERS = (
    "FRACTAL_NZ_to_ND",
    "FRACTAL_NZ_to_NCHW",
    "NC1HWC0_to_NCHW",
    "NC1HWC0_to_NHWC",
    "NC1HWC0_to_HWCN",
    "FRACTAL_Z_to_NCHW",
    "FRACTAL_Z_to_HWCN",
    "NDC1HWC0_to_NCDHW",
    "NDC1HWC0_to_ND",
    "NCHW_to_FRACTAL_Z",
    "HWCN_to_FRACTAL_Z",
    "NHWC_to_FRACTAL_Z",
)


@pytest.fixture(scope="module")
def msaccucmp():
    """``name -> convert(shape_from, shape_to, flat_array)`` of every msaccucmp converter found."""
    modules, reason = load_msaccucmp("converters", MSACCUCMP_CONVERTERS)
    if modules is None:
        pytest.skip(reason)
    return {name: module.convert for name, module in modules.items()}


def converter(converters, name):
    if name not in converters:
        pytest.skip(f"this msaccucmp has no convert_{name}.py")
    return converters[name]


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=str)
def test_fractal_nz_agrees_with_msaccucmp(msaccucmp, dtype):
    convert = converter(msaccucmp, "FRACTAL_NZ_to_ND")
    for origin, seed in [((33, 17), 1), ((2, 20, 40), 2), ((2, 3, 20, 40), 3), ((5,), 4)]:
        storage = storage_shape(origin, "FRACTAL_NZ", "ND", itemsize=2)
        flat = random_array((int(np.prod(storage)),), dtype, seed)  # random padding, too
        ours = to_origin(flat, "FRACTAL_NZ", storage, origin, "ND")
        # theirs is [B, N, C] for rank >= 3 (batch dims merged) and [1, C] for rank 1: compare the values
        theirs = convert(list(storage), list(origin), flat)
        assert np.array_equal(bits(ours.ravel()), bits(np.ravel(theirs)))
    # their FRACTAL_NZ_to_NCHW is the same [..., N, C] conversion (no NCHW layout is involved)
    storage, origin = (2, 3, 2, 2, 16, 16), (2, 3, 20, 30)
    flat = random_array((int(np.prod(storage)),), dtype, seed=5)
    theirs = converter(msaccucmp, "FRACTAL_NZ_to_NCHW")(list(storage), list(origin), flat)
    ours = to_origin(flat, "FRACTAL_NZ", storage, origin, "NCHW")
    assert np.array_equal(bits(ours.ravel()), bits(np.ravel(theirs)))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=str)
def test_nc1hwc0_agrees_with_msaccucmp(msaccucmp, dtype):
    n, c, h, w = 2, 19, 3, 5
    storage = (n, 2, h, w, 16)
    flat = random_array((int(np.prod(storage)),), dtype, seed=5)
    # their NC1HWC0 converters ignore shape_to and keep the channel padding (C1*C0 channels): slice theirs
    cases = [("NCHW", (n, c, h, w), np.s_[:, :c]), ("NHWC", (n, h, w, c), np.s_[..., :c])]
    cases.append(("HWCN", (h, w, c, n), np.s_[:, :, :c, :]))
    for layout, origin, keep in cases:
        theirs = converter(msaccucmp, f"NC1HWC0_to_{layout}")(list(storage), list(origin), flat)
        ours = to_origin(flat, "NC1HWC0", storage, origin, layout)
        assert np.array_equal(bits(ours), bits(theirs[keep]))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=str)
def test_fractal_z_agrees_with_msaccucmp(msaccucmp, dtype):
    n, c, h, w = 17, 19, 3, 2
    storage = (2 * h * w, 2, 16, 16)
    flat = random_array((int(np.prod(storage)),), dtype, seed=6)
    for layout, origin in [("NCHW", (n, c, h, w)), ("HWCN", (h, w, c, n))]:
        theirs = converter(msaccucmp, f"FRACTAL_Z_to_{layout}")(list(storage), list(origin), flat)
        ours = to_origin(flat, "FRACTAL_Z", storage, origin, layout)
        assert theirs.shape == ours.shape
        assert np.array_equal(bits(ours), bits(theirs))


def test_fractal_z_writer_agrees_with_msaccucmp(msaccucmp):
    w = random_array((17, 19, 3, 2), np.dtype(np.float16), seed=7)
    layouts = {"NCHW": (0, 1, 2, 3), "HWCN": (2, 3, 1, 0), "NHWC": (0, 2, 3, 1)}
    for layout, perm in layouts.items():
        x = np.ascontiguousarray(w.transpose(perm))
        # their writers are Python loops with C0 = Ni = 16 whatever the dtype; group=1 is a plain conv
        theirs = converter(msaccucmp, f"{layout}_to_FRACTAL_Z")(list(x.shape), [], x.ravel())
        ours = from_origin(x, "FRACTAL_Z", layout, c0=16, ni=16)
        assert theirs.shape == ours.shape
        assert np.array_equal(bits(ours), bits(theirs))


def test_ndc1hwc0_agrees_with_msaccucmp(msaccucmp):
    n, c, d, h, w = 2, 19, 3, 2, 4
    storage = (n, d, 2, h, w, 16)
    flat = random_array((int(np.prod(storage)),), np.dtype(np.float32), seed=8)
    ours = to_origin(flat, "NDC1HWC0", storage, (n, c, d, h, w), "NCDHW")
    theirs = converter(msaccucmp, "NDC1HWC0_to_NCDHW")(list(storage), [n, c, d, h, w], flat)
    assert np.array_equal(bits(ours), bits(theirs))
    # their NDC1HWC0_to_ND reads a 5-D target as NCDHW (never NDHWC)
    theirs = converter(msaccucmp, "NDC1HWC0_to_ND")(list(storage), [n, c, d, h, w], flat)
    assert np.array_equal(bits(ours), bits(theirs))
