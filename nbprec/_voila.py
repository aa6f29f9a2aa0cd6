"""``python -m nbprec._voila ARGS``: Voila's command (``voila ARGS``), started a second sooner.

:func:`nbprec.report.serve` runs Voila through this module: it defers the import that compiles a grammar
(:func:`nbprec._deferred_imports.defer_iri_grammar`), then hands the arguments to Voila's own entry point. It
lies outside :mod:`nbprec.report`, whose package imports numpy: this process imports only ``nbprec`` (1 ms).
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run Voila with this process's arguments."""
    from nbprec._deferred_imports import defer_iri_grammar

    defer_iri_grammar()
    from voila.app import main as voila

    sys.argv[0] = "voila"
    return int(voila() or 0)


if __name__ == "__main__":
    sys.exit(main())
