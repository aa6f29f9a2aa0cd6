"""Bisect to the smallest set of ops (or modules) to keep in float32 for the target's outputs to pass.

>>> result = nbprec.remedy.bisect(setup)           # doctest: +SKIP
>>> result.keep, result.runs, result.cost.flops_share  # doctest: +SKIP

1. **Reference runs** (4): the benchmark captured and again uncaptured, the target captured and again with
   a profile (FLOPs, time, module, source line per op). The two runs of each configuration must give
   bit-identical outputs and gradients, the runs must return the same outputs, and the comparison must not
   find different inputs, weights or models; otherwise the runs are refused (:class:`NotComparableError`).
2. **Candidates**, widened until keeping all of them passes (one run per stage): the ops nbprec blames (ops
   failing in the comparison, forward or backward, and the ops the overflow scan blames), then every op of
   those kinds, then every op. Casts, views and copies are never candidates. With ``granularity="modules"``
   the candidates are the innermost modules those ops ran in.
3. **Search**: the first failing op alone is tried first (one run settles the common case of one culprit).
   Otherwise a candidate list that passes as a whole, ordered cheapest first (forward FLOPs, then execution
   order, so that where several sets would fix the run the cheapest is kept), is reduced one necessary
   element at a time: the shortest prefix that (with what is already kept) passes is found by binary search,
   its last element is necessary, and the search goes on in the part before it. Any elements, not only
   contiguous ranges, can end up in the set; ``k`` necessary elements of ``n`` cost about ``k * log2(n)``
   runs.
4. **1-minimality** is then checked directly: the set without any one of its elements must fail (``k`` runs;
   an element whose removal still passes is dropped and the check repeated).

Every run is a fresh copy of the model with the same seed; results are cached per set, so the search is
deterministic. ``max_runs`` bounds the runs: when it is reached, the smallest passing set found so far is
returned with ``minimal=False``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pandas as pd

from nbprec.remedy.bisect_result import BisectResult
from nbprec.remedy.cost import cost_of
from nbprec.remedy.judge import Judgement, compare_runs, judge
from nbprec.remedy.remedy import Remedy, forward_name, module_path
from nbprec.remedy.setup import NotComparableError, RemedyError, RunResult, Setup

GRANULARITIES = ("ops", "modules")


class _BudgetSpent(Exception):
    """The maximum number of runs was reached."""


class _Checker:
    """Runs the target with a set kept in float32 and judges it; caches by set; counts runs."""

    def __init__(
        self, setup: Setup, bench: RunResult, granularity: str, loss_scale: float, max_runs: int, say: Any, probe: Any
    ) -> None:
        self.setup, self.bench, self.granularity = setup, bench, granularity
        self.loss_scale, self.max_runs, self.say, self.probe = loss_scale, max_runs, say, probe
        self.cache: dict[frozenset[str], Judgement] = {}
        self.history: list[dict[str, Any]] = []
        self.runs = 0

    def count(self, why: str, size: int, passed: bool | None, failing: str = "") -> None:
        self.runs += 1
        self.history.append({"run": self.runs, "size": size, "passed": passed, "why": why, "failing": failing})

    def judge_set(self, keep: list[str], why: str) -> Judgement:
        key = frozenset(keep)
        if key in self.cache:
            return self.cache[key]
        if self.runs >= self.max_runs:
            raise _BudgetSpent
        ops, modules = (keep, ()) if self.granularity == "ops" else ((), keep)
        captured = self.setup.check == "ops"
        run = self.setup.run(
            "target", ops=ops, modules=modules, loss_scale=self.loss_scale, capture=self.probe if captured else None
        )
        result = _judge(self.setup, run, self.bench)
        self.cache[key] = result
        self.count(why, len(keep), result.passed, "; ".join(result.failing()))
        self.say(
            f"bisect: run {self.runs:>3}/{self.max_runs} keep {len(keep):>4}: {'pass' if result else 'fail'}  ({why})"
        )
        return result

    def passes(self, keep: list[str], why: str) -> bool:
        return self.judge_set(keep, why).passed


def _judge(setup: Setup, run: RunResult, bench: RunResult) -> Judgement:
    """Judge a run by the setup's check (comparing its capture with the benchmark's for check "ops")."""
    comparison = None
    if setup.check == "ops":
        comparison = compare_runs(run, bench, rule=setup.rule, precision=setup.dtype)
    return judge(run, bench, rule=setup.rule, precision=setup.dtype, check=setup.check, comparison=comparison)


def _blamed(setup: Setup, target: RunResult, bench: RunResult) -> tuple[list[str], str, list[str]]:
    """Ops blamed by the comparison (failing, forward or backward) and the overflow scan, as forward names;
    the first failing op; and the culprits among them (ops that introduced an error, critical overflows)."""
    from nbprec.overflow import scan

    assert target.dump is not None
    comp = compare_runs(target, bench, rule=setup.rule, precision=setup.dtype)
    findings = [f for f in comp.verdict().findings if f.blocking]  # (runs that are not comparable: no bisection)
    if findings:
        raise NotComparableError(f"{findings[0].message} {findings[0].fix}")
    names = comp.ops.loc[comp.ops["status"] == "fail", "op"].astype(str).tolist()
    report = scan(target.dump)
    o = report.ops
    blamed_ops = o[(o["level"] == "critical") | ((o["level"] == "high") & ~o["in_abnormal"].astype(bool))]
    names += blamed_ops["op"].astype(str).tolist()
    first = comp.first_failing_op()
    culprits = comp.ops.loc[(comp.ops["status"] == "fail") & (comp.ops["origin"] == "introduced"), "op"].astype(str)
    critical = o.loc[o["level"] == "critical", "op"].astype(str)
    return (
        list(dict.fromkeys(forward_name(n) for n in names)),
        "" if first is None else str(first["op"]),
        list(dict.fromkeys(forward_name(n) for n in [*culprits, *critical])),
    )


def _stages(profile: pd.DataFrame, blamed: list[str], granularity: str) -> list[tuple[str, list[str]]]:
    """Candidate lists, narrowest first, in execution order."""
    ops = profile[profile["promotable"]]
    blamed_set = set(blamed)
    module_ops = {module_path(n) for n in blamed if module_path(n) is not None}
    first = ops[ops["op"].isin(blamed_set) | ops["module"].isin(module_ops - {None})]
    kinds = set(first["op_type"])
    second = ops[ops["op_type"].isin(kinds)]
    stages = [("blamed", first), ("failing kinds", second), ("all ops", ops)]
    out: list[tuple[str, list[str]]] = []
    for name, rows in stages:
        if granularity == "ops":
            items = rows["op"].astype(str).tolist()
        else:
            items = [m for m in dict.fromkeys(rows["module"]) if isinstance(m, str)]
        if items and (not out or len(items) > len(out[-1][1])):
            out.append((name, items))
    return out


def _minimize(checker: _Checker, candidates: list[str], notes: list[str]) -> tuple[list[str], bool]:
    """The search of the module docstring; returns the set and whether 1-minimality was verified."""
    found: list[str] = []
    rest = list(candidates)  # invariant: found + rest passes
    order = {c: i for i, c in enumerate(candidates)}
    try:
        while not checker.passes(sorted(found, key=order.get), "the necessary ops found so far"):
            lo, hi = 1, len(rest)
            while lo < hi:
                mid = (lo + hi) // 2
                if checker.passes(
                    sorted(found + rest[:mid], key=order.get), f"binary search: first {mid} of {len(rest)}"
                ):
                    hi = mid
                else:
                    lo = mid + 1
            found.append(rest[lo - 1])
            rest = rest[: lo - 1]
        keep = sorted(found, key=order.get)
        changed = True
        while changed and len(keep) > 1:
            changed = False
            for item in list(keep):
                trial = [k for k in keep if k != item]
                if checker.passes(trial, f"1-minimality: without {item}"):
                    notes.append(f"{item} turned out unnecessary once the others were kept (the check is not monotone)")
                    keep, changed = trial, True
                    break
        return keep, True
    except _BudgetSpent:
        best = sorted(found + rest, key=order.get)
        notes.append(
            f"stopped after {checker.runs} runs (max_runs={checker.max_runs}): the set is the smallest passing one "
            "found so far, not proven minimal; raise max_runs to finish"
        )
        return best, False


def _check_comparable(setup: Setup, pairs: list[tuple[str, RunResult, RunResult]], bench: RunResult, target: RunResult):
    for what, a, b in pairs:
        if not a.same_as(b):
            raise NotComparableError(
                f"two runs of the {what} with the same seed gave different results: the run is not deterministic "
                "(dropout in training mode, unseeded randomness, non-deterministic kernels); use model.eval() or "
                "seed everything inside forward"
            )
    judge(target, bench, rule=setup.rule, precision=setup.dtype)  # raises when the outputs differ in kind
    if setup.target_model is not None:
        _check_weights(setup)


def _check_weights(setup: Setup) -> None:
    torch = setup._torch
    bench, target = setup.build("bench"), setup.build("target")
    b, t = dict(bench.named_parameters()), dict(target.named_parameters())
    if b.keys() != t.keys():
        raise NotComparableError(
            f"the target model's parameters differ from the benchmark's ({sorted(set(b) ^ set(t))[:3]})"
        )
    for name, p in b.items():
        q = t[name]
        with torch.no_grad():
            if p.shape != q.shape or not torch.equal(p.to(q.dtype), q):
                raise NotComparableError(f"parameter {name} differs between the target and the benchmark models")


def bisect(
    setup: Setup,
    *,
    granularity: str = "ops",
    candidates: list[str] | None = None,
    loss_scale: float | None = None,
    max_runs: int = 60,
    progress: bool | Callable[[str], Any] = True,
    workdir: str | None = None,
) -> BisectResult:
    """Find a 1-minimal set of ops (or modules) whose promotion to float32 makes the target pass.

    Parameters
    ----------
    setup
        The model, inputs and target configuration.
    granularity
        ``"ops"`` (API calls such as ``Functional.gelu.1.forward``) or ``"modules"`` (module paths).
    candidates
        Search these (op names or module paths) instead of the blamed ones.
    loss_scale
        Bisect under this loss scale (default the setup's).
    max_runs
        Upper bound on model runs, reference runs included.
    progress
        Print a line per run to stderr (``True``), stay quiet (``False``), or call this with each line.
    workdir
        Folder for the two reference captures (a temporary folder when omitted).

    Raises
    ------
    NotComparableError
        When the runs cannot be compared (not deterministic, different outputs, inputs or weights).
    RemedyError
        When even every candidate kept in float32 does not pass (the cause is not precision, or it is the
        loss scale).
    """
    import tempfile
    from pathlib import Path

    if granularity not in GRANULARITIES:
        raise RemedyError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}")
    if max_runs < 6:
        raise RemedyError(f"max_runs must be at least 6 (4 reference runs and 2 searching), not {max_runs}")
    say = (
        progress if callable(progress) else (lambda line: print(line, file=sys.stderr)) if progress else lambda _: None
    )
    scale = setup.loss_scale if loss_scale is None else float(loss_scale)
    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="nbprec-bisect-"))
    say(f"bisect: 4 reference runs of {setup.description} (benchmark and target, twice each) ...")
    bench = setup.run("bench", loss_scale=scale, capture=folder / "bench")
    bench_again = setup.run("bench", loss_scale=scale)
    target = setup.run("target", loss_scale=scale, capture=folder / "target")
    profiled = setup.run("target", loss_scale=scale, profile=True)
    extra = 0
    if not target.same_as(profiled):  # the profile's FLOP counter may change rounding: one plain run decides
        profiled_plain = setup.run("target", loss_scale=scale)
        extra = 1
        _check_comparable(setup, [("benchmark", bench, bench_again), ("target", target, profiled_plain)], bench, target)
    else:
        _check_comparable(setup, [("benchmark", bench, bench_again), ("target", target, profiled)], bench, target)
    checker = _Checker(setup, bench, granularity, scale, max_runs, say, folder / "probe")
    baseline = _judge(setup, target, bench)
    checker.cache[frozenset()] = baseline
    checker.count("reference: benchmark (captured)", 0, None)
    checker.count("reference: benchmark again (determinism)", 0, None)
    checker.count("reference: target as it is (captured)", 0, baseline.passed, "; ".join(baseline.failing()))
    checker.count("reference: target again (determinism, profile)", 0, None)
    if extra:
        checker.count("reference: target again, without the profile's FLOP counter (determinism)", 0, None)
    profile = profiled.profile if profiled.profile is not None else pd.DataFrame()
    notes: list[str] = []
    if baseline.passed:
        return _result([], "none needed", [], True, checker, profile, setup, loss_scale, notes)
    blamed: list[str] = []
    culprits: list[str] = []
    if candidates is not None:
        stages = [("given", list(dict.fromkeys(candidates)))]
        known = set(profile["op"]) if granularity == "ops" else set(setup.module_paths())
        unknown = [c for c in stages[0][1] if c not in known]
        if unknown:
            raise RemedyError(f"candidates not found in the target run: {unknown[:5]}")
    else:
        blamed, first, culprits = _blamed(setup, target, bench)
        stages = _stages(profile, blamed, granularity)
        suspect = _suspect(profile, first, granularity)
        if suspect is not None:  # the first failing op is the first suspect: one run may settle it
            try:
                if checker.passes([suspect], f"the first failing op alone ({first})"):
                    return _result(
                        [suspect], "first failing op", [suspect], True, checker, profile, setup, loss_scale, notes
                    )
            except _BudgetSpent:
                raise RemedyError(
                    f"max_runs={max_runs} was reached before any candidate set passed; raise it"
                ) from None
    chosen: tuple[str, list[str]] | None = None
    last: Judgement | None = None
    try:
        for stage, items in stages:
            last = checker.judge_set(items, f"all {len(items)} candidates ({stage})")
            if last.passed:
                chosen = (stage, items)
                break
    except _BudgetSpent:
        raise RemedyError(f"max_runs={max_runs} was reached before any candidate set passed; raise it") from None
    if chosen is None:
        raise RemedyError(_no_fix_reason(stages, last, checker, setup))
    stage, items = chosen
    keep, minimal = _minimize(checker, _search_order(items, profile, granularity, blamed, culprits), notes)
    position = {c: i for i, c in enumerate(items)}
    keep = sorted(keep, key=position.get)  # reported in execution order
    return _result(keep, stage, items, minimal, checker, profile, setup, loss_scale, notes)


def _search_order(
    items: list[str], profile: pd.DataFrame, granularity: str, blamed: list[str], culprits: list[str]
) -> list[str]:
    """Culprits first (ops that introduced an error, critical overflows), then the other blamed ops, then the
    rest; each group cheapest first (forward FLOPs), then in execution order. Where several sets would fix the
    run (the faulty op, or the op that makes its input float32 under autocast), the search keeps the
    culprit, and the cheapest."""

    def tier(item: str) -> int:
        if granularity == "ops":
            return 0 if item in culprits else 1 if item in blamed else 2
        inside = cost_of([item], profile, "modules").profile
        rows = kept_rows_of(item, inside)
        return 0 if rows.isin(culprits).any() else 1 if rows.isin(blamed).any() else 2

    flops = {item: cost_of([item], profile, granularity).flops for item in items}
    return sorted(items, key=lambda item: (tier(item), flops[item], items.index(item)))


def kept_rows_of(module: str, profile: pd.DataFrame) -> pd.Series:
    """The op names a module's calls made (its submodules included)."""
    from nbprec.remedy.cost import kept_rows

    return kept_rows([module], profile, "modules")["op"].astype(str)


def _suspect(profile: pd.DataFrame, first: str, granularity: str) -> str | None:
    """The first failing op as a candidate: its forward op (ops), or the module it ran in (modules)."""
    if not first:
        return None
    rows = profile[profile["promotable"] & (profile["op"] == forward_name(first))]
    if rows.empty:
        return None
    if granularity == "ops":
        return str(rows.iloc[0]["op"])
    module = rows.iloc[0]["module"]
    return str(module) if isinstance(module, str) else None


def _result(
    keep: list[str],
    stage: str,
    items: list[str],
    minimal: bool,
    checker: _Checker,
    profile: pd.DataFrame,
    setup: Setup,
    loss_scale: float | None,
    notes: list[str],
) -> BisectResult:
    final = checker.cache.get(frozenset(keep))
    granularity = checker.granularity
    remedy = Remedy(tuple(keep), (), loss_scale) if granularity == "ops" else Remedy((), tuple(keep), loss_scale)
    return BisectResult(
        keep,
        granularity,
        remedy,
        bool(final and final.passed),
        minimal,
        checker.runs,
        items,
        stage,
        cost_of(keep, profile, granularity),
        _history(checker),
        final,
        setup,
        notes,
    )


def _history(checker: _Checker) -> pd.DataFrame:
    return pd.DataFrame(checker.history, columns=["run", "size", "passed", "why", "failing"])


def _no_fix_reason(stages: list[tuple[str, list[str]]], last: Judgement | None, checker: _Checker, setup: Setup) -> str:
    widest = stages[-1][1] if stages else []
    failing = ", ".join(last.failing()) if last is not None else "the outputs"
    text = (
        f"keeping all {len(widest)} candidate {'ops' if checker.granularity == 'ops' else 'modules'} in float32 "
        f"still fails ({failing}): the difference does not come from the precision of these "
        f"{'ops' if checker.granularity == 'ops' else 'modules'}"
    )
    if last is not None and "gradients" in last.failing() and last.metric("gradients", "target_nonfinite") > 0:
        text += (
            f"; the {setup.dtype} parameter gradients overflow even so: lower the loss scale (nbprec.overflow.remedies "
            "gives a bound), or keep whole modules (granularity='modules', their parameters become float32)"
        )
    elif checker.granularity == "ops":
        text += "; try granularity='modules', or check the kernel (nbprec isolate)"
    return text + f" ({checker.runs} runs)"


__all__ = ["GRANULARITIES", "BisectResult", "bisect"]
