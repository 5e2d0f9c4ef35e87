"""Refit the bundled convergence tasks from the MLPerf reference points recorded in data/convergence.toml.

    python -m scripts.fit_convergence            # print each task's fit and leave-one-out errors
    python -m scripts.fit_convergence --write    # write the fitted numbers back into the file

The points are the file's own (each task's ``points``, with their source); this script only fits
them (:func:`engine.convergence.fit_critical_batch`) and checks each by leaving it out.
tests/test_convergence.py runs :func:`fits` and compares it with the recorded numbers.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from engine.convergence import conformal_q, fit_critical_batch, leave_one_out, load_tasks
from engine.convergence.tasks import DEFAULT_TASKS_PATH


def fits(path: Path = DEFAULT_TASKS_PATH) -> dict[str, dict]:
    """Per task: fitted e_min_samples, b_crit_samples, loo_q and the per-point leave-one-out errors."""
    out = {}
    for key, task in load_tasks(path).items():
        pts = task.point_samples()
        b, e = [p[0] for p in pts], [p[1] for p in pts]
        fit = fit_critical_batch(b, e)
        loo = leave_one_out(b, e)
        in_sample = [fit.samples_to_target(x) / y - 1.0 for x, y in pts]
        out[key] = {
            "e_min_samples": fit.e_min_samples,
            "b_crit_samples": fit.b_crit_samples,
            "loo_q": conformal_q(loo),
            "batches": b,
            "in_sample": in_sample,
            "loo": loo,
        }
    return out


def _rounded(x: float) -> str:
    return f"{float(f'{x:.6g}'):.6g}" if x < 1e5 else f"{round(x, -int(f'{x:e}'.split('e')[1]) + 5):.0f}"


def _write(path: Path, result: dict[str, dict]) -> None:
    text = path.read_text()
    for key, r in result.items():
        head = f"[tasks.{key}]"
        start = text.index(head)
        end = text.find("\n[", start + len(head))
        end = len(text) if end < 0 else end
        block = text[start:end]
        for name in ("e_min_samples", "b_crit_samples", "loo_q"):
            value = f"{r[name]:.4f}" if name == "loo_q" else _rounded(r[name])
            block = re.sub(rf"^{name} = .*$", f"{name} = {value}", block, flags=re.M)
        text = text[:start] + block + text[end:]
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the fitted numbers into data/convergence.toml")
    args = ap.parse_args(argv)
    result = fits()
    for key, r in result.items():
        print(f"{key}: e_min {r['e_min_samples']:,.0f} samples, b_crit {r['b_crit_samples']:,.0f} samples, loo_q {r['loo_q']:.4f}")
        for b, ins, loo in zip(r["batches"], r["in_sample"], r["loo"]):
            print(f"  batch {b:>7,.0f}: in-sample {100 * ins:+6.1f}%   left out {100 * loo:+6.1f}%")
        med = sorted(abs(x) for x in r["loo"])[len(r["loo"]) // 2]
        print(f"  median |leave-one-out error| {100 * med:.1f}%")
    if args.write:
        _write(DEFAULT_TASKS_PATH, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
