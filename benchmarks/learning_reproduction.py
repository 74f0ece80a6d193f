"""Does a re-run reproduce a learning run's result file? Every value but ``timing`` and
``provenance`` compared, one by one.

    python -m benchmarks.learning_reproduction ORIGINAL.json RERUN.json

Two runs on different CPUs may round float reductions differently (another SIMD width sums in
another order), so the table keeps apart what has to be identical (the config hash, the training
tasks, the hash of every action taken, every validation outcome: all integers, strings and
booleans) from the float diagnostics (loss, KL, entropy, gradient norm, ...), given per field as
the largest absolute and relative difference. A sampled token that changed would change an action hash.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: What a re-run is not compared on: wall times and where it ran.
UNCOMPARED = ("timing", "provenance")


def leaves(x: Any, path: str = "") -> dict[str, Any]:
    """Every scalar of a JSON value by its path; list indices are dropped from the field name
    (``iterations.kl``) and kept in the path only to pair values."""
    if isinstance(x, dict):
        return {p: v for k, val in x.items() for p, v in leaves(val, f"{path}.{k}" if path else k).items()}
    if isinstance(x, list):
        return {p: v for i, val in enumerate(x) for p, v in leaves(val, f"{path}[{i}]").items()}
    return {path: x}


def field(path: str) -> str:
    return "".join(part.split("]")[-1] for part in path.split("["))


def is_float(v: Any) -> bool:
    return isinstance(v, float)


def compare(original: dict[str, Any], rerun: dict[str, Any]) -> dict[str, Any]:
    """``exact``: the non-float values (compared, differing paths); ``floats``: per field, how many
    values differ, the largest absolute difference and the largest relative one, |a - b| / max(|a|, |b|)
    (the files round diagnostics to 6 decimals: a value near 0 has a large relative one)."""
    a = leaves({k: v for k, v in original.items() if k not in UNCOMPARED})
    b = leaves({k: v for k, v in rerun.items() if k not in UNCOMPARED})
    exact = {"compared": 0, "differing": sorted(set(a) ^ set(b))}
    floats: dict[str, dict[str, Any]] = {}
    for p in sorted(set(a) & set(b)):
        x, y = a[p], b[p]
        if is_float(x) and is_float(y):
            f = floats.setdefault(field(p), {"compared": 0, "differing": 0, "max_absolute": 0.0, "max_relative": 0.0})
            f["compared"] += 1
            if x != y:
                f["differing"] += 1
                f["max_absolute"] = max(f["max_absolute"], abs(x - y))
                f["max_relative"] = max(f["max_relative"], abs(x - y) / max(abs(x), abs(y)))
        else:
            exact["compared"] += 1
            if x != y:
                exact["differing"].append(p)
    games = sum(len(v["outcomes"]) for v in rerun["validations"])
    return {"run": f"{rerun['method']}_seed{rerun['seed']}", "exact": exact, "floats": floats,
            "validations": len(rerun["validations"]), "games": games,
            "iteration_0_measured_again": rerun["timing"]["iteration_0_measured_here"],
            "where": [where(original), where(rerun)]}


def where(run: dict[str, Any]) -> str:
    prov = run["provenance"]
    cpu = prov["machine"].get("cpu_model")
    cpu = f"{cpu} ({prov['machine']['cpu_capability']})" if cpu else "CPU not recorded"
    return f"commit {prov['commit'][:7]}, {cpu}"


def table(original: dict[str, Any], rerun: dict[str, Any]) -> str:
    c = compare(original, rerun)
    ex = c["exact"]
    zero = "measured again" if c["iteration_0_measured_again"] else "reused from the seed's iteration-0 file"
    lines = ["| run | first run | re-run | non-float values identical | validations | iteration 0 |",
             "|---|---|---|---|---|---|",
             f"| {c['run']} | {c['where'][0]} | {c['where'][1]} | {ex['compared'] - len(ex['differing'])}"
             f" / {ex['compared']} | {c['validations']} ({c['games']} games) | {zero} |",
             "", "| float field | values differing / compared | largest absolute difference | largest relative difference |",
             "|---|---|---|---|"]
    lines += [f"| `{name}` | {f['differing']} / {f['compared']} | {f['max_absolute']:.1e} | {f['max_relative']:.1e} |"
              for name, f in c["floats"].items() if f["differing"]]
    same = [f for f in c["floats"].values() if not f["differing"]]
    if same:
        lines.append(f"| the {len(same)} other float fields | 0 / {sum(f['compared'] for f in same)} | 0 | 0 |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("original", type=Path, help="the committed run file, e.g. benchmarks/results/learning_runs/scpo_seed0.json")
    parser.add_argument("rerun", type=Path, help="the same (method, seed) run again, e.g. from a clean clone")
    args = parser.parse_args(argv)
    original, rerun = (json.loads(p.read_text()) for p in (args.original, args.rerun))
    print(table(original, rerun))
    return compare(original, rerun)


if __name__ == "__main__":
    main()
