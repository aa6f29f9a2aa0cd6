"""Check that the JupyterLab extension nbprec ships (nbprec/labextension/) is what its source builds to.

``make check-labextension`` runs this after ``npm ci``: it copies the source (hard links for node_modules)
into ``build/labextension-check/``, builds it there with the locked @jupyterlab/builder, and compares the
result with ``nbprec/labextension/``. The shipped files are never touched; ``make labextension`` rebuilds them.

What is compared, and why not every byte: the build is reproducible (same lock, same
@jupyterlab/core-meta, so the same shared-module versions whatever JupyterLab the virtualenv has), except
for one number. webpack names the module-federation container entry by hashing its identifier, which holds
the absolute paths of the exposed modules, so a checkout in another folder gives that one module another id,
hence another remoteEntry.<contenthash>.js name, and another "load" path in package.json. So: every file but
remoteEntry must be identical, byte for byte; remoteEntry must be identical once the container entry's id is
replaced by a placeholder; package.json must be identical but for jupyterlab._build.load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent
ROOT = SOURCE.parent
SHIPPED = ROOT / "nbprec" / "labextension"
SCRATCH = ROOT / "build" / "labextension-check"
#: What the build reads, besides node_modules (linked, not copied).
INPUTS = ("package.json", "package-lock.json", "tsconfig.json", ".npmrc", "src", "style")
#: The container entry: `var e={ID(e` opens the module table, `let n=r(ID);(_JUPYTERLAB=` ends the file.
ENTRY_ID = re.compile(r"^(var _JUPYTERLAB;\(\(\)=>\{\"use strict\";var \w+=\{)(\d+)(\()")


def build_copy() -> Path:
    """Build the extension from a copy of the source; returns the folder the build wrote."""
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    work = SCRATCH / "jupyterlab-nbprec"
    work.mkdir(parents=True)
    for name in INPUTS:
        src = SOURCE / name
        if src.is_dir():
            shutil.copytree(src, work / name)
        else:
            shutil.copy2(src, work / name)
    # hard links: node_modules stays inside the package folder as webpack sees it (a symlink would not)
    shutil.copytree(SOURCE / "node_modules", work / "node_modules", copy_function=os.link, symlinks=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["npm", "run", "build"], cwd=work, env=env, check=True)
    return SCRATCH / "nbprec" / "labextension"


def normalised_entry(text: str) -> str:
    """remoteEntry with the container entry's module id replaced by ``ID``."""
    match = ENTRY_ID.match(text)
    if match is None:
        raise ValueError("remoteEntry does not start as expected: update check_build.py for this webpack")
    module_id = match.group(2)
    text = ENTRY_ID.sub(r"\g<1>ID\g<3>", text, count=1)
    tail = re.compile(rf"(\w+\(){module_id}(\);\(_JUPYTERLAB=)")
    if not tail.search(text):
        raise ValueError("remoteEntry does not end as expected: update check_build.py for this webpack")
    return tail.sub(r"\g<1>ID\g<2>", text)


def files(folder: Path) -> dict[str, Path]:
    """Files under ``folder`` by relative path, remoteEntry's hashed name replaced by ``remoteEntry.js``."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            out[re.sub(r"remoteEntry\.[0-9a-f]+\.js$", "remoteEntry.js", rel)] = path
    return out


def differences(shipped: Path, built: Path) -> list[str]:
    """What differs between the shipped and the freshly built extension (empty when they match)."""
    a, b = files(shipped), files(built)
    problems = [f"only shipped: {k}" for k in sorted(a.keys() - b.keys())]
    problems += [f"only built: {k}" for k in sorted(b.keys() - a.keys())]
    for name in sorted(a.keys() & b.keys()):
        old, new = a[name].read_bytes(), b[name].read_bytes()
        if name == "package.json":
            old_json, new_json = json.loads(old), json.loads(new)
            for data in (old_json, new_json):
                data.get("jupyterlab", {}).get("_build", {}).pop("load", None)
            same = old_json == new_json
        elif name == "static/remoteEntry.js":
            same = normalised_entry(old.decode()) == normalised_entry(new.decode())
        else:
            same = old == new
        if not same:
            problems.append(f"differs: {name}")
    return problems


def main() -> int:
    if not (SOURCE / "node_modules").is_dir():
        print("check_build: run `npm ci` in jupyterlab-nbprec first (make check-labextension does)", file=sys.stderr)
        return 2
    built = build_copy()
    problems = differences(SHIPPED, built)
    if problems:
        print("nbprec/labextension/ is not what jupyterlab-nbprec/ builds to:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(f"the fresh build is in {built}; `make labextension` rebuilds nbprec/labextension/", file=sys.stderr)
        return 1
    print(f"nbprec/labextension/ matches a fresh build of jupyterlab-nbprec/ ({len(files(built))} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
