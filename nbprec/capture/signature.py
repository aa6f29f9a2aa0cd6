"""Call signatures: how an API op was called, in strict JSON, so that the call can be replayed.

The capture records, for every API op, its API name and its arguments with tensors replaced by references
to their slots (``{"$tensor": "1"}``); isolation (:mod:`nbprec.compare.isolate`) rebuilds the call from a
dump's own tensors. Values JSON cannot hold are tagged: ``{"$dtype": "float16"}``, ``{"$slice": [0, 4,
None]}``, ``{"$float": "nan"}``, ``{"$tuple": [...]}``, ``{"$device": "cpu"}``, ``{"$ellipsis": true}``;
anything else is kept as ``{"$repr": "..."}``, which marks the call as not replayable.

Examples
--------
>>> encode_value(slice(0, 4, None), None, "")
{'$slice': [0, 4, None]}
>>> decode_value({'$tuple': [1, {'$float': 'inf'}]}, None, {})
(1, inf)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from nbprec.capture.tensors import is_nested
from nbprec.errors import NbprecError

#: Where each API prefix of the capture's names lives in torch.
API_NAMESPACES = {"Functional": "torch.nn.functional", "Torch": "torch", "Tensor": "torch.Tensor"}

_MAX_DEPTH = 8
_MAX_REPR = 200


def _strict_dumps() -> Callable[[Any], str]:
    """``json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))`` for the values
    :func:`encode_value` makes: json's C encoder, made once (``JSONEncoder.encode`` makes a new one at every call,
    1.5 us of the 3 a capture spends per argument list). Without the C encoder, or where its private signature
    differs, ``JSONEncoder.encode``."""
    plain = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain

    def default(value: Any) -> Any:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    try:  # (no circular check: encode_value's output is a fresh tree)
        encoder = make(None, default, json.encoder.encode_basestring, None, ":", ",", False, False, False)  # type: ignore[attr-defined]
        sample = [{"$tensor": "0.1", "k": [1, -2.5e-7, None, True]}, "é\n"]
        if "".join(encoder(sample, 0)) != plain(sample):
            return plain
    except Exception:  # a private API: any failure means "use the public one"
        return plain
    return lambda value: "".join(encoder(value, 0))


_DUMPS = _strict_dumps()


class NotReplayableError(NbprecError):
    """A recorded call cannot be rebuilt (an argument was recorded only as its repr, or the API is unknown)."""


def _slot(prefix: str, key: str | int) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def encode_value(value: Any, torch: Any, prefix: str, depth: int = 0) -> Any:
    """A JSON-safe form of one argument; tensors become ``{"$tensor": slot}`` (slots as the capture names them)."""
    if torch is not None and isinstance(value, torch.Tensor):
        return {"$tensor": prefix or "0"}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if depth > _MAX_DEPTH:
        return {"$repr": "nested too deep"}
    if isinstance(value, (list, tuple)):
        items = [encode_value(v, torch, _slot(prefix, i), depth + 1) for i, v in enumerate(value)]
        return items if isinstance(value, list) else {"$tuple": items}
    if is_nested(value):  # (not a list or tuple: a mapping)
        return {"$dict": {str(k): encode_value(v, torch, _slot(prefix, k), depth + 1) for k, v in value.items()}}
    if isinstance(value, slice):
        return {"$slice": [encode_value(v, torch, prefix, depth + 1) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if torch is not None:
        if isinstance(value, torch.dtype):
            return {"$dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        if isinstance(value, torch.Size):
            return {"$tuple": list(value)}
    return {"$repr": repr(value)[:_MAX_REPR]}


def _encode_arguments(
    args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, torch: Any
) -> tuple[list[Any], dict[str, Any]]:
    encoded_args = [encode_value(a, torch, str(i)) for i, a in enumerate(args)]
    encoded_kwargs = {str(k): encode_value(v, torch, str(k)) for k, v in (kwargs or {}).items()}
    return encoded_args, encoded_kwargs


def encode_call(api: str, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, torch: Any) -> dict[str, Any]:
    """The recorded form of one call: ``{"api", "args", "kwargs", "replayable"}``."""
    encoded_args, encoded_kwargs = _encode_arguments(args, kwargs, torch)
    replayable = "$repr" not in repr((encoded_args, encoded_kwargs))
    return {"api": api, "args": encoded_args, "kwargs": encoded_kwargs, "replayable": replayable}


def encode_call_json(api: str, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, torch: Any) -> str:
    """:func:`encode_call` as strict JSON text, the text the capture writes for every API op.

    Raises
    ------
    ValueError
        If an argument cannot be written as strict JSON (never for the values :func:`encode_value` makes).
    """
    encoded_args, encoded_kwargs = _encode_arguments(args, kwargs, torch)
    args_text, kwargs_text = _DUMPS(encoded_args), _DUMPS(encoded_kwargs)
    replayable = "false" if "$repr" in args_text or "$repr" in kwargs_text else "true"
    return f'{{"api":{_DUMPS(api)},"args":{args_text},"kwargs":{kwargs_text},"replayable":{replayable}}}'


def decode_value(value: Any, torch: Any, tensors: Mapping[str, Any]) -> Any:
    """Rebuild one argument; ``tensors`` maps slots to the tensors to put back."""
    if isinstance(value, list):
        return [decode_value(v, torch, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        slot = value["$tensor"]
        if slot not in tensors:
            raise NotReplayableError(f"the call needs the tensor in slot {slot!r}, which the dump does not hold")
        return tensors[slot]
    if "$float" in value:
        return float(value["$float"])
    if "$tuple" in value:
        return tuple(decode_value(v, torch, tensors) for v in value["$tuple"])
    if "$dict" in value:
        return {k: decode_value(v, torch, tensors) for k, v in value["$dict"].items()}
    if "$slice" in value:
        return slice(*(decode_value(v, torch, tensors) for v in value["$slice"]))
    if "$ellipsis" in value:
        return Ellipsis
    if "$dtype" in value:
        return getattr(torch, value["$dtype"])
    if "$device" in value:
        return torch.device(value["$device"])
    if "$repr" in value:
        raise NotReplayableError(f"an argument was recorded only as {value['$repr']!r}")
    raise NotReplayableError(f"unknown recorded value {value!r}")


def resolve_api(api: str, torch: Any) -> Any:
    """The torch callable of a capture API name such as ``"Functional.gelu"`` or ``"Tensor.add"``."""
    prefix, _, name = api.partition(".")
    namespace = API_NAMESPACES.get(prefix)
    if namespace is None or not name:
        raise NotReplayableError(f"{api!r} is not an API the capture records (prefixes {', '.join(API_NAMESPACES)})")
    target: Any = torch
    for part in namespace.split(".")[1:]:
        target = getattr(target, part)
    func = getattr(target, name, None)
    if func is None:
        raise NotReplayableError(f"{namespace}.{name} does not exist in this torch version")
    return func


def decode_call(call: Mapping[str, Any], torch: Any, tensors: Mapping[str, Any]) -> tuple[Any, tuple, dict]:
    """``(callable, args, kwargs)`` rebuilt from a recorded call and the tensors of its slots."""
    func = resolve_api(str(call.get("api", "")), torch)
    args = tuple(decode_value(a, torch, tensors) for a in call.get("args", []))
    kwargs = {k: decode_value(v, torch, tensors) for k, v in dict(call.get("kwargs", {})).items()}
    return func, args, kwargs
