"""``nbprec overflow``: the first overflowing op, its impact, headroom and remedies."""

from __future__ import annotations

import argparse

from nbprec.cli._text import _count


def _cmd_overflow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbprec.overflow import headroom, remedies, scan

    report = scan(args.path, bench=args.bench, dtype=args.dtype, payload=not args.no_payload, rule=args.rule)
    s = report.summary()
    print(f"dump       {s['path']} ({s['format']})")
    print(f"tensors    {s['tensors']}  ({', '.join(f'{k}: {v}' for k, v in s['tensor_status'].items())})")
    print(f"ops        {s['ops']}  ({', '.join(f'{k}: {v}' for k, v in s['levels'].items())})")
    first = report.first_critical()
    if first is None:
        print("first critical op: none (no op produced NaN/inf/saturated values from normal inputs)")
        abnormal = report.first_abnormal()
        if abnormal is not None:
            print(f"first abnormal op: {abnormal['op']} (order {abnormal['order']})")
            print(f"  {abnormal['note']}")
    else:
        print(f"first critical op: {first['op']} (order {first['order']})")
        print(f"  {first['reason']}")
    if report.impact is not None:
        print(f"impact     {report.impact.verdict}: {report.impact.message}")
    if report.npu is not None:
        files = report.meta.get("npu_overflow_files", 0)
        print(f"NPU overflow detection: {_count(len(report.npu), 'record')} in {_count(files, 'debug file')}")
        for row in report.npu.head(args.top).itertuples(index=False):
            where = f"{row.op} ({row.op_type}, order {row.order})" if row.op else "no matching op"
            what = f"{row.unit}: {row.conditions} (status {row.status})" if row.unit else ""
            print(f"  {row.timestamp}  {where}  {what}{'  note: ' + row.note if row.note else ''}")
    ranked = report.ranked().head(args.top)
    if not ranked.empty:
        print(f"ranked ops (top {len(ranked)}):")
        cols = ["order", "op", "level", "out_status", "out_abs_max", "reason"]
        print(ranked[cols].to_string(index=False, max_colwidth=90, float_format=lambda v: f"{v:.6g}"))
    if report.origin() is not None or not report:
        print()
        print(remedies(report, device_type=args.device_type, recorded_scale=args.loss_scale).to_text())
    hr = None
    if args.headroom:
        hr = headroom(args.path, payload=not args.no_payload)
        print()
        print("headroom if cast down (bits = log2(max_finite / abs_max)):")
        for dt, v in hr.summary()["dtypes"].items():
            bits = "-" if v["min_headroom_bits"] is None else f"{v['min_headroom_bits']:.2f}"
            print(
                f"  {dt:<14} overflow {_count(v['overflowing_ops'], 'op'):>8} "
                f"(first: {v['first_overflow_op'] or '-'}), "
                f"precision loss {_count(v['precision_loss_ops'], 'op'):>8}, min headroom {bits} bits"
            )
    if args.output:
        out = Path(args.output)
        report.save(out)
        if hr is not None:
            hr.save(out / "headroom")
        print(f"wrote {out}/")
    return 0
