"""Bit-exact conversion of PyTorch tensors to numpy, shared by the msprobe reader and the PyTorch capture.

numpy has no bfloat16 or float8 types; ``tensor.numpy()`` refuses them and ``tensor.float().numpy()``
would change the dtype on record. These helpers reinterpret the raw bits instead (bfloat16 through an
``int16`` view, float8 through a ``uint8`` view) and label them with the matching ``ml_dtypes`` type, so the
array holds exactly the bits the tensor held.

torch is imported only inside the functions, through :func:`nbprec._optional.require`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbprec._optional import require
from nbprec.errors import NbprecError

#: torch dtype attribute names of the 1-byte float formats, each ml_dtypes' type of that name (viewed through
#: uint8; ml_dtypes is imported with the first tensor converted, as torch is).
_FLOAT8_TYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def torch_dtype_name(dtype: Any) -> str:
    """The name of a torch dtype without the ``torch.`` prefix (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


def torch_to_numpy(tensor: Any) -> np.ndarray:
    """Convert a torch tensor to a numpy array with the same dtype and the same bits.

    The tensor is detached and moved to the CPU; sparse tensors are densified and lazy conjugate/negative
    views resolved. bfloat16 becomes ``ml_dtypes.bfloat16``, float8 types their ``ml_dtypes`` namesakes;
    every other dtype numpy knows is returned by ``tensor.numpy()`` unchanged.

    Parameters
    ----------
    tensor
        A ``torch.Tensor`` (an ``nn.Parameter`` is fine).

    Returns
    -------
    numpy.ndarray
        Shares memory with the (CPU, contiguous) tensor where possible.

    Raises
    ------
    NbprecError
        If the object is not a tensor, or its dtype has no numpy equivalent (e.g. ``complex32``, quantized).

    Examples
    --------
    >>> import torch                                                    # doctest: +SKIP
    >>> torch_to_numpy(torch.tensor([1.5], dtype=torch.bfloat16)).dtype  # doctest: +SKIP
    dtype(bfloat16)
    """
    torch = require("torch", "converting torch tensors to numpy")
    import ml_dtypes

    if not isinstance(tensor, torch.Tensor):
        raise NbprecError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.resolve_conj().resolve_neg().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    for attr in _FLOAT8_TYPES:
        if t.dtype == getattr(torch, attr, None):
            return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, attr))
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as exc:
        raise NbprecError(f"torch dtype {torch_dtype_name(t.dtype)} has no numpy equivalent: {exc}") from exc
