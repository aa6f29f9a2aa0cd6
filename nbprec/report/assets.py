"""JavaScript an offline report inlines: where it lives, how to fetch it, and how to find each widget's bundle.

Two bundles ship in no Python package: the widget manager's AMD embed bundle
(``@jupyter-widgets/html-manager/dist/embed-amd.js``) and ``require.js``. :func:`fetch_assets` gets them from
the npm registry with ``npm pack`` (at install/build time, never at report time) into a cache folder; nothing
third-party is committed to the repository. Each widget library's own AMD bundle is read from where its Python
package installed it: ``<sys.prefix>/share/jupyter/nbextensions/<module>/index.js``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nbprec.errors import NbprecError

#: npm packages fetched by :func:`fetch_assets`: (package spec, file inside the tarball, cached file name).
NPM_ASSETS = (
    ("@jupyter-widgets/html-manager@1.0.15", "package/dist/embed-amd.js", "html-manager-embed-amd.js"),
    ("requirejs@2.3.8", "package/require.js", "require.js"),
)
#: Environment variable naming the asset folder (overrides the defaults).
ENV_VAR = "NBPREC_JS_DIR"
_MANIFEST = "manifest.json"
FETCH_HINT = "nbprec report --fetch-assets"


class AssetsError(NbprecError):
    """The report's JavaScript assets cannot be fetched or read."""


def candidate_dirs() -> list[Path]:
    """Folders searched for the fetched bundles, first match wins.

    ``$NBPREC_JS_DIR`` when set, then ``<sys.prefix>/share/nbprec/js`` (inside the virtualenv), then
    ``~/.cache/nbprec/js``.
    """
    dirs = [Path(os.environ[ENV_VAR])] if os.environ.get(ENV_VAR) else []
    return [*dirs, Path(sys.prefix) / "share" / "nbprec" / "js", Path.home() / ".cache" / "nbprec" / "js"]


def _writable(folder: Path) -> bool:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    return os.access(probe, os.W_OK)


def default_dir() -> Path:
    """Where :func:`fetch_assets` writes: the first of :func:`candidate_dirs` that can be written."""
    for folder in candidate_dirs():
        if _writable(folder):
            return folder
    raise AssetsError(
        f"no writable folder for the report assets among {[str(d) for d in candidate_dirs()]}; "
        f"set {ENV_VAR} to a writable folder"
    )


@dataclass(frozen=True)
class Assets:
    """The fetched bundles: file paths of the html-manager embed bundle and require.js, and their versions."""

    folder: Path
    embed_amd: Path
    require_js: Path
    versions: dict[str, str] = field(default_factory=dict)


def find_assets(folder: str | os.PathLike[str] | None = None) -> Assets | None:
    """The fetched bundles in ``folder`` (or the first of :func:`candidate_dirs` holding both), else None."""
    folders = [Path(folder)] if folder is not None else candidate_dirs()
    names = [name for _, _, name in NPM_ASSETS]
    for d in folders:
        if all((d / n).is_file() and (d / n).stat().st_size > 0 for n in names):
            versions: dict[str, str] = {}
            if (d / _MANIFEST).is_file():
                try:
                    manifest = json.loads((d / _MANIFEST).read_text(encoding="utf-8"))
                    versions = {k: str(v.get("version", "")) for k, v in manifest.items() if isinstance(v, dict)}
                except (OSError, ValueError):
                    versions = {}
            return Assets(d, d / names[0], d / names[1], versions)
    return None


def missing_assets_message() -> str:
    """What to run when the bundles are missing (named in reports and errors)."""
    where = ", ".join(str(d) for d in candidate_dirs())
    return (
        "the report's widget JavaScript (the @jupyter-widgets/html-manager embed bundle and require.js, fetched "
        f"from the npm registry) was not found in {where}. Run `{FETCH_HINT}` (needs node/npm; `make demo` and "
        "CI do it) and write the report again. Until then the report shows static tables and plots."
    )


def fetch_assets(
    folder: str | os.PathLike[str] | None = None, *, npm: str | None = None, force: bool = False
) -> Assets:
    """Fetch the html-manager embed bundle and require.js from the npm registry with ``npm pack``.

    Parameters
    ----------
    folder
        Where to put them (default: :func:`default_dir`).
    npm
        The npm executable (default: ``npm`` on ``PATH``).
    force
        Fetch again even when the files are already there.

    Returns
    -------
    Assets

    Raises
    ------
    AssetsError
        npm is missing, ``npm pack`` failed (no registry access?) or a tarball lacks the expected file.
    """
    target = Path(folder) if folder is not None else default_dir()
    found = find_assets(target)
    if found is not None and not force:
        return found
    exe = npm or shutil.which("npm")
    if exe is None:
        raise AssetsError(
            "npm was not found on PATH; install Node.js (e.g. `apt-get install -y npm`) and run "
            f"`{FETCH_HINT}` again, or run `npm pack {' '.join(s for s, _, _ in NPM_ASSETS)}` yourself and "
            f"extract dist/embed-amd.js and require.js into {target} as "
            f"{' and '.join(n for _, _, n in NPM_ASSETS)}"
        )
    target.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="nbprec-npm-") as tmp:
        for spec, member, name in NPM_ASSETS:
            info = _npm_pack(exe, spec, Path(tmp))
            tarball = Path(tmp) / info["filename"]
            data = _extract(tarball, member)
            (target / (name + ".tmp")).write_bytes(data)
            (target / (name + ".tmp")).replace(target / name)
            manifest[name] = {
                "package": info.get("name", spec),
                "version": info.get("version", ""),
                "integrity": info.get("integrity", ""),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
    (target / _MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    assets = find_assets(target)
    if assets is None:  # pragma: no cover - the files were just written
        raise AssetsError(f"{target}: the fetched files are missing")
    return assets


def _npm_pack(npm: str, spec: str, dest: Path) -> dict[str, str]:
    cmd = [npm, "pack", spec, "--json", "--pack-destination", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=dest)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AssetsError(f"`{' '.join(cmd)}` could not run: {exc}") from exc
    if proc.returncode != 0:
        raise AssetsError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    try:
        info = json.loads(proc.stdout)[0]
    except (ValueError, IndexError, KeyError) as exc:
        raise AssetsError(f"`{' '.join(cmd)}` printed no JSON description: {proc.stdout[:300]!r}") from exc
    if not (dest / info.get("filename", "")).is_file():
        tgz = sorted(dest.glob("*.tgz"), key=lambda p: p.stat().st_mtime)
        if not tgz:
            raise AssetsError(f"`{' '.join(cmd)}` wrote no tarball into {dest}")
        info["filename"] = tgz[-1].name
    return info


def _extract(tarball: Path, member: str) -> bytes:
    """One file of an npm tarball, read without extracting anything to disk."""
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            item = tar.getmember(member)
            handle = tar.extractfile(item) if item.isfile() else None
            if handle is None:
                raise KeyError(member)
            return handle.read()
    except (KeyError, tarfile.TarError, OSError) as exc:
        raise AssetsError(f"{tarball}: no file {member} in the npm tarball ({exc})") from exc


# -- widget bundles installed by Python packages --------------------------------------------------------------
_BUILTIN_MODULES = ("@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output")


def nbextensions_dirs() -> list[Path]:
    """Folders where Python packages install classic-notebook AMD bundles (the running environment first)."""
    dirs = [Path(sys.prefix) / "share" / "jupyter" / "nbextensions"]
    try:
        from jupyter_core.paths import jupyter_path

        dirs += [Path(p) for p in jupyter_path("nbextensions")]
    except ImportError:  # pragma: no cover - jupyter_core comes with nbconvert
        pass
    return list(dict.fromkeys(dirs))


def widget_modules(state: dict) -> list[str]:
    """The JavaScript modules named by a notebook's widget state (``model_module``/``view_module``)."""
    modules: list[str] = []
    for model in state.get("state", {}).values():
        for key in ("model_module", "view_module"):
            name = model.get(key) or (model.get("state") or {}).get(f"_{key}")
            if isinstance(name, str) and name and name not in modules:
                modules.append(name)
    return modules


def widget_bundles(modules: Iterable[str]) -> tuple[dict[str, Path], list[str]]:
    """Each third-party module's installed AMD bundle, and the modules whose bundle was not found.

    The ``@jupyter-widgets/*`` modules are part of the html-manager embed bundle and are skipped.
    """
    found: dict[str, Path] = {}
    missing: list[str] = []
    for module in modules:
        if module in _BUILTIN_MODULES:
            continue
        for d in nbextensions_dirs():
            path = d / module / "index.js"
            if path.is_file():
                found[module] = path
                break
        else:
            missing.append(module)
    return found, missing


_ANON_DEFINE = re.compile(r"\A\s*(/\*.*?\*/\s*)?define\(\s*(?=[\[\(f])", re.DOTALL)


def named_amd(code: str, module: str) -> str:
    """``code`` with its leading anonymous ``define(`` named ``module``, so it can be inlined in a page.

    Bundles whose first statement is not an anonymous ``define`` are wrapped so their first anonymous
    ``define`` call gets the name.
    """
    match = _ANON_DEFINE.match(code)
    name = json.dumps(module)
    if match:
        return code[: match.end()] + name + "," + code[match.end() :]
    return (
        "(function(){var d=window.define,done=false;window.define=function(){var a=[].slice.call(arguments);"
        f"if(!done&&typeof a[0]!=='string'){{done=true;a.unshift({name});}}return d.apply(this,a);}};"
        "window.define.amd=d.amd;window.__nbprecRestoreDefine=function(){window.define=d;};})();\n"
        + code
        + "\n;window.__nbprecRestoreDefine&&window.__nbprecRestoreDefine();"
    )


def script_safe(code: str) -> str:
    """JavaScript made safe to sit inside an inline ``<script>`` element (no early ``</script``, no ``<!--``)."""
    code = re.sub(r"</(script)", r"<\\/\1", code, flags=re.IGNORECASE)
    return code.replace("<!--", "<\\!--")
