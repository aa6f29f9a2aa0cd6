"""The Jupyter server extension behind nbprec's JupyterLab extension (also in Notebook 7: same server).

Endpoints, under the server's base URL, for logged-in users allowed to read (GET) or write (POST) contents:

- ``GET /nbprec/dumps?path=DIR``: the entries of the folder ``DIR`` (a server path, ``''`` for the root) that
  are dumps nbprec reads, by name, with their format (:func:`nbprec.jupyter.detect.detect_dumps`):
  ``{"path": DIR, "dumps": {"tiny_fp32": "nbprec"}, "complete": true}``;
- ``GET /nbprec/info``: ``{"version": ..., "rules": [...], "default_rule": "default"}``;
- ``POST /nbprec/notebooks`` with ``{"directory": DIR, "target": T, "bench": B, "rule": R}`` (``T`` and
  ``B`` relative to ``DIR``; no ``B`` to inspect ``T`` alone): writes an investigation notebook into ``DIR``
  (:mod:`nbprec.jupyter.notebooks`) and answers ``{"path": ...}`` (201).

Paths stay inside the contents manager's root folder, and hidden ones are refused unless the server allows
them. The extension is enabled by ``etc/jupyter/jupyter_server_config.d/nbprec.json`` (installed with nbprec)
or ``jupyter server extension enable nbprec``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import posixpath
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import ensure_async, url_path_join
from tornado import web

from nbprec.jupyter.detect import ProbeCache, detect_dumps

#: Seconds one request may spend probing a folder's entries (the rest is probed on the next refresh).
PROBE_BUDGET = 1.5


class _Refused(Exception):
    """A request nbprec answers with ``status`` and a one-line ``message`` for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NbprecHandler(APIHandler):
    """What the nbprec endpoints share: contents authorisation, and paths kept inside the root folder."""

    auth_resource = "contents"

    def local_path(self, api_path: str) -> str:
        """The file-system path of the server path ``api_path``; refuses paths leaving the root or hidden."""
        root = getattr(self.contents_manager, "root_dir", None)
        if not root:
            raise _Refused(404, "this server's contents are not local files: nbprec cannot read them")
        parts = [p for p in api_path.replace("\\", "/").split("/") if p not in ("", ".")]
        if ".." in parts:
            raise _Refused(403, f"{api_path}: outside the server's root folder")
        if not getattr(self.contents_manager, "allow_hidden", False) and any(p.startswith(".") for p in parts):
            raise _Refused(403, f"{api_path}: hidden files are not served")
        return os.path.join(os.path.abspath(root), *parts)

    def refuse(self, error: _Refused) -> None:
        """Answer with the error's status and ``{"message": ...}`` (as the server's own API errors)."""
        self.set_status(error.status)
        self.finish(json.dumps({"message": str(error)}))

    async def in_thread(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)`` on a worker thread: probing touches the disk, the server must not wait."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(func, *args, **kwargs))


class DumpsHandler(NbprecHandler):
    """``GET /nbprec/dumps?path=DIR``: the dumps among the entries of a folder."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        api_path = self.get_query_argument("path", "")
        try:
            folder = self.local_path(api_path)
            if not os.path.isdir(folder):
                raise _Refused(404, f"{api_path or '/'}: no such folder")
        except _Refused as error:
            return self.refuse(error)
        cache = self.settings.setdefault("nbprec_probe_cache", ProbeCache())
        dumps, complete = await self.in_thread(detect_dumps, folder, budget=PROBE_BUDGET, cache=cache)
        self.finish(json.dumps({"path": api_path, "dumps": dumps, "complete": complete}))


class InfoHandler(NbprecHandler):
    """``GET /nbprec/info``: nbprec's version and the comparison rules."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        from nbprec import __version__
        from nbprec.compare.rules import preset_names

        self.finish(json.dumps({"version": __version__, "rules": list(preset_names()), "default_rule": "default"}))


class NotebooksHandler(NbprecHandler):
    """``POST /nbprec/notebooks``: write an investigation notebook next to the dumps."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        try:
            path = await self._create(self.get_json_body() or {})
        except _Refused as error:
            return self.refuse(error)
        self.set_status(201)
        self.finish(json.dumps({"path": path}))

    async def _create(self, body: dict[str, Any]) -> str:
        from nbprec.compare.rules import preset_names
        from nbprec.jupyter.notebooks import investigation_notebook, notebook_name

        directory, target, bench, rule = (body.get(k) for k in ("directory", "target", "bench", "rule"))
        directory = directory or ""
        rule = rule or "default"
        if not all(isinstance(v, str) for v in (directory, target or "", bench or "", rule)):
            raise _Refused(400, "directory, target, bench and rule must be strings")
        if not target:
            raise _Refused(400, "give the target dump")
        if rule not in preset_names():
            raise _Refused(400, f"unknown rule {rule!r}; the rules are {', '.join(preset_names())}")
        if not os.path.isdir(self.local_path(directory)):
            raise _Refused(404, f"{directory or '/'}: no such folder")
        sides = [posixpath.normpath(p.replace("\\", "/")) for p in (target, bench) if p]
        for side in sides:
            await self._check_dump(posixpath.join(directory, side), side)
        nb = investigation_notebook(sides[0], sides[1] if len(sides) > 1 else None, rule)
        path = await self._free_path(directory, notebook_name(*sides))
        model = {"type": "notebook", "format": "json", "content": nb}
        await ensure_async(self.contents_manager.save(model, path))
        return path

    async def _check_dump(self, api_path: str, shown: str) -> None:
        from nbprec.errors import NbprecError
        from nbprec.formats import guess_format

        if posixpath.isabs(shown) or posixpath.normpath(api_path).startswith(".."):
            raise _Refused(403, f"{shown}: outside the server's root folder")
        local = self.local_path(posixpath.normpath(api_path))
        try:
            await self.in_thread(guess_format, local)
        except (NbprecError, OSError) as exc:
            problem = str(exc).removeprefix(local).lstrip(": ") or "not readable"
            raise _Refused(400, f"{shown}: {problem}") from None

    async def _free_path(self, directory: str, name: str) -> str:
        stem, ext = posixpath.splitext(name)
        for n in range(1000):
            candidate = url_path_join(directory, f"{stem}-{n}{ext}" if n else name).lstrip("/")
            if not await ensure_async(self.contents_manager.file_exists(candidate)):
                return candidate
        raise _Refused(409, f"{directory or '/'}: too many notebooks named {name}")


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the ``/nbprec/...`` handlers (called by jupyter_server through ``nbprec``'s extension points)."""
    web_app = serverapp.web_app
    base = web_app.settings["base_url"]
    web_app.settings.setdefault("nbprec_probe_cache", ProbeCache())
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "nbprec", "dumps"), DumpsHandler),
            (url_path_join(base, "nbprec", "info"), InfoHandler),
            (url_path_join(base, "nbprec", "notebooks"), NotebooksHandler),
        ],
    )
    serverapp.log.info("nbprec: dump detection and investigation notebooks at %snbprec/", base)
