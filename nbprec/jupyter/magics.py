"""The ``%nbprec`` magics: the command line in a notebook, with widgets instead of text.

``%load_ext nbprec`` registers them (or list ``"nbprec"`` in ``c.InteractiveShellApp.extensions`` of an IPython
profile's ``ipython_config.py`` to have them in every kernel). The line magic reads its arguments with the
command line's own parser (:func:`nbprec.cli.build_parser`), so every option of ``nbprec COMMAND`` works and
means the same; see :meth:`NbprecMagics.nbprec` (``%nbprec?``) for what each command shows.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import keyword
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from nbprec.errors import NbprecError

#: The variable that always holds the result of the last ``%nbprec`` command.
RESULT_NAME = "_nbprec"
#: Commands whose result (or running capture) can be bound; the others print what the command line prints.
_BINDS = ("compare", "info", "overflow", "ni", "isolate", "diagnose", "capture")


def split_bind(tokens: list[str]) -> tuple[list[str], str | None]:
    """Take ``-o NAME`` out of the magic's arguments: ``(the other tokens, NAME or None)``.

    The command line's own ``-o`` (write files) is spelled ``--output`` in a magic.

    Examples
    --------
    >>> split_bind(["compare", "a", "b", "-o", "comp", "--rule", "cann"])
    (['compare', 'a', 'b', '--rule', 'cann'], 'comp')
    """
    rest: list[str] = []
    name = None
    it = iter(tokens)
    for token in it:
        if token == "-o":
            name = next(it, None)
            if name is None:
                raise UsageError("nbprec: -o needs a variable name (-o NAME binds the result to NAME)")
        elif token.startswith("-o") and len(token) > 2 and not token.startswith("--"):
            name = token[2:]
        else:
            rest.append(token)
    if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
        raise UsageError(
            f"nbprec: -o binds the result to a Python variable, and {name!r} is not a valid name "
            f"(to write files, use --output {name})"
        )
    return rest, name


def parse_cli(tokens: list[str]) -> argparse.Namespace | None:
    """Parse ``tokens`` with the command line's parser; None after ``--help``; :class:`UsageError` on a mistake."""
    from nbprec.cli import build_parser

    try:
        parser = build_parser()
    except ImportError as exc:  # a command module of this installation is missing
        raise UsageError(f"nbprec: the command line cannot be built here: {exc}") from None
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parser.parse_args(tokens)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help or --version, printed already
            if tokens and tokens[0] in _BINDS:
                print("\nIn %nbprec, -o NAME binds the result to the variable NAME; write files with --output.")
            return None
        lines = [line for line in errors.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else "invalid arguments"
        message = "%" + message if message.startswith("nbprec") else message
        raise UsageError(f"{message}  (%nbprec {tokens[0] if tokens else ''} --help shows the options)") from None


@magics_class
class NbprecMagics(Magics):
    """``%nbprec`` (line) and ``%%nbprec`` (cell) magics; registered by ``%load_ext nbprec``."""

    @line_cell_magic
    def nbprec(self, line: str, cell: str | None = None) -> None:
        """nbprec in a notebook: the ``nbprec`` command line, showing widgets instead of text.

        Line magics (every option of the same command line command works, and ``%nbprec COMMAND --help``
        lists them)::

          %nbprec compare TARGET BENCH [--rule R | --threshold 0.98 [--metric M]] [--mode M] [--graph G]
                                       [--mapping FILE] [--step N] [--rank N] [--output DIR]
              compare two dumps and show the dashboard (operator table, error trend, tensor inspector,
              subgraph, overflow view, all linked); the result is the Comparison
          %nbprec info PATH [PATH ...] [--format F] [--json]
              what each dump holds, and its problems; the result is the Dump (a list for several)
          %nbprec overflow PATH [--bench B] [--headroom] [--dtype D] [--rule R] [--output DIR]
              the first overflowing op, whether it mattered, remedies; the result is the OverflowReport
          %nbprec ni OP --target PATH [--bench B] [--graph G] [--depth N] [--svg FILE]
              node info of one op: inputs, outputs, statistics, metrics, neighbours; the result is the NodeInfo
          %nbprec isolate TARGET OP [OP ...] [--dtype float64]
              re-run ops on their own inputs in float64: the op's own error
          %nbprec diagnose FILE [FILE ...] [--json]
              known Ascend tuning and conversion failures in logs, with remedies; the result is the Diagnosis
          %nbprec demo|report|config ...
              as on the command line (text output; nbprec serve is not run in a kernel)

        Cell magics::

          %%nbprec capture DIR [--mode statistics|tensor] [--steps 0|2] [--level both|modules|apis]
                               [--model NAME] [--include RE] [--exclude RE] [--no-backward] [--overwrite]
                               [--overflow-check]
              run the cell and capture every PyTorch model it runs into the dump folder DIR: the models the
              notebook's variables hold (or --model NAME), one exactly as nbprec.capture(model, DIR) would,
              several under their variable names; API calls (Functional.linear, ...) whoever makes them.
              The running capture is bound before the cell runs: call _nbprec.step() between steps.
          %%nbprec diagnose [FILE ...]
              diagnose the log (or the aoe/atc commands) pasted in the cell

        Results: ``_nbprec`` always holds the result of the last command; ``-o NAME`` binds it to ``NAME``
        too (as ``%timeit -o``). The command line's ``-o DIR`` (write files) is spelled ``--output DIR`` here.

        Errors (a missing dump, an unknown rule, a bad option) show as one line, with no traceback.

        Examples::

          %load_ext nbprec
          %nbprec compare runs/bf16 runs/fp32 --rule cann -o comp
          comp.first_failing_op()
          %nbprec overflow runs/fp16 --bench runs/fp32

          %%nbprec capture runs/bf16 --mode tensor
          loss = model(x).sum()
          loss.backward()
        """
        tokens = self._split(line)
        tokens, name = split_bind(tokens)
        command = tokens[0] if tokens else ""
        if name is not None and command not in _BINDS:
            raise UsageError(f"nbprec {command}: prints text and has no result to bind with -o (use --output)")
        if cell is not None:
            return self._cell(command, tokens, cell, name)
        if not tokens:
            raise UsageError("nbprec: give a command: compare, info, overflow, ni, isolate, diagnose (see %nbprec?)")
        if command == "capture":
            raise UsageError("nbprec capture is a cell magic: start the cell with %%nbprec capture DIR")
        from nbprec.jupyter.commands import HANDLERS, REFUSED, diagnose_module

        if command in REFUSED:
            raise UsageError(REFUSED[command])
        with self._one_line_errors(command):
            if command == "diagnose":
                diagnose_module()  # a clear line when this installation has no nbprec.diagnose
            args = parse_cli(tokens)
            if args is None:
                return None
            handler = HANDLERS.get(args.command)
            if handler is None:
                args.func(args)
                return None
            self._bind(handler(args), name)
        return None

    def _cell(self, command: str, tokens: list[str], cell: str, name: str | None) -> None:
        if command == "capture":
            from nbprec.jupyter.capture_cell import build_capture_parser, run_capture_cell

            parser = build_capture_parser()
            with self._one_line_errors(command):
                args = self._parse(parser, tokens[1:], command)
                if args is None:
                    return None
                run_capture_cell(self.shell, args, cell, lambda cap: self._bind(cap, name))
            return None
        if command == "diagnose":
            from nbprec.jupyter.commands import diagnose_module, run_diagnose

            with self._one_line_errors(command):
                diagnose_module()
                args = parse_cli(tokens if len(tokens) > 1 else [*tokens, "-"])
                if args is None:
                    return None
                self._bind(run_diagnose(args, text=cell), name)
            return None
        raise UsageError(f"nbprec: %%nbprec {command}: the cell magics are capture and diagnose (%nbprec? says more)")

    def _split(self, line: str) -> list[str]:
        try:
            return shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"nbprec: cannot split the arguments: {exc}") from None

    @staticmethod
    def _parse(parser: argparse.ArgumentParser, tokens: list[str], command: str) -> argparse.Namespace | None:
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                return parser.parse_args(tokens)
        except SystemExit as exc:
            if exc.code in (0, None):
                return None
            lines = [line for line in errors.getvalue().splitlines() if line.strip()]
            message = lines[-1] if lines else "invalid arguments"
            raise UsageError(f"{message}  (%%nbprec {command} --help shows the options)") from None

    def _bind(self, result: Any, name: str | None) -> None:
        self.shell.user_ns[RESULT_NAME] = result
        if name:
            self.shell.user_ns[name] = result

    @contextlib.contextmanager
    def _one_line_errors(self, command: str) -> Any:
        """Turn nbprec's errors (and missing files) into one line: IPython shows a UsageError without traceback."""
        try:
            yield
        except UsageError:
            raise
        except (NbprecError, OSError) as exc:
            raise UsageError(f"nbprec {command}: {exc}".rstrip()) from None


def load_ipython_extension(ipython: Any) -> None:
    """Register :class:`NbprecMagics` with ``ipython`` (what ``%load_ext nbprec`` calls)."""
    ipython.register_magics(NbprecMagics)
