"""CANN's msaccucmp as a test oracle: its storage-format converters and metric algorithms, loaded by path.

msaccucmp ships as Python source in the PyPI package ``mindstudio-probe`` (``msprobe/msaccucmp``). It is
an oracle for tests and benchmarks only, never an nbprec dependency, and it is installed without its
dependencies: only its pure-Python files are loaded (its dump-file parser needs a CANN native library).

``msprobe`` itself is never imported: its package ``__init__`` replaces ``sys.modules["tensorflow"]`` with a
tensorboard stub when tensorboard is installed, which would leak into other tests. ``find_spec`` locates the
package without running it. The files import ``cmp_utils`` and ``algorithm_manager`` as top-level packages,
so ``<msprobe>/msaccucmp`` is put on ``sys.path`` only while loading; afterwards ``sys.path`` is restored and
the top-level modules they imported are dropped from ``sys.modules`` (the loaded files keep their own
references, and nothing named ``cmp_utils`` is left for other code to trip over).

Examples
--------
>>> modules, reason = load_msaccucmp("converters", ["NC1HWC0_to_NHWC"])
>>> if modules is None:
...     pytest.skip(reason)                                     # doctest: +SKIP
>>> nhwc = modules["NC1HWC0_to_NHWC"].convert([2, 1, 3, 3, 16], [2, 3, 3, 5], flat)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

#: kind -> (folder under msaccucmp, file-name prefix); a module's key is its file name without prefix and ``.py``
KINDS = {
    "converters": ("format_manager/builtin_format_convert", "convert_"),  # convert(shape_from, shape_to, flat)
    "algorithms": ("algorithm_manager/builtin_algorithm", "alg_"),  # compare(my_output, ground_truth, args)
}
PIP_HINT = 'pip install --no-deps "mindstudio-probe==26.2.0"'


def msaccucmp_root() -> tuple[Path | None, str]:
    """The ``msaccucmp`` folder of the installed mindstudio-probe, or None and the reason it is unavailable."""
    spec = importlib.util.find_spec("msprobe")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None, f"msprobe is not installed ({PIP_HINT}): no msaccucmp oracle"
    root = Path(next(iter(spec.submodule_search_locations))) / "msaccucmp"
    if not root.is_dir():
        return None, f"{root} does not exist: this mindstudio-probe ships no msaccucmp"
    return root, ""


def _under(module: ModuleType, root: str) -> bool:
    """Whether a module was loaded from a file (or is a package folder) under ``root``."""
    places = [getattr(module, "__file__", None) or "", *(getattr(module, "__path__", None) or ())]
    return any(str(place).startswith(root) for place in places)


def load_msaccucmp(kind: str, names: Iterable[str] | None = None) -> tuple[dict[str, ModuleType] | None, str]:
    """Load msaccucmp's converter or algorithm modules by path.

    Parameters
    ----------
    kind
        ``"converters"`` (``format_manager/builtin_format_convert/convert_<FROM>_to_<TO>.py``, keyed
        ``"<FROM>_to_<TO>"``, each with ``convert(shape_from, shape_to, flat_array)``) or ``"algorithms"``
        (``algorithm_manager/builtin_algorithm/alg_<Name>.py``, keyed ``"<Name>"``, each with
        ``compare(my_output, ground_truth, args)``).
    names
        The modules wanted; names this msaccucmp lacks are left out of the result. None: all of that kind.

    Returns
    -------
    tuple
        ``(modules, "")``, or ``(None, reason)`` when mindstudio-probe is not installed, a file cannot be
        imported, or none of the modules asked for exists.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    root, reason = msaccucmp_root()
    if root is None:
        return None, reason
    folder_name, prefix = KINDS[kind]
    folder = root / folder_name
    wanted = sorted(folder.glob(f"{prefix}*.py")) if names is None else [folder / f"{prefix}{n}.py" for n in names]
    files = [f for f in wanted if f.is_file()]
    if not files:
        return None, f"no msaccucmp {kind} found in {folder}"
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(root))
    modules: dict[str, ModuleType] = {}
    try:
        for path in files:
            key = path.stem[len(prefix) :]
            spec = importlib.util.spec_from_file_location(f"_msaccucmp_{path.stem}", path)
            if spec is None or spec.loader is None:
                return None, f"msaccucmp's {path.name} cannot be loaded"
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except ImportError as exc:
                return None, f"msaccucmp's {path.name} cannot be imported here: {exc}"
            modules[key] = module
    finally:
        sys.path[:] = saved_path
        for added in set(sys.modules) - saved_modules:  # their top-level cmp_utils etc. must not leak
            if _under(sys.modules[added], str(root)):
                del sys.modules[added]
    return modules, ""


__all__ = ["KINDS", "PIP_HINT", "load_msaccucmp", "msaccucmp_root"]
