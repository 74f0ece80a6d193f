"""Run the reliability probes (tests/reliability_cases.py) and print their table (docs/reliability.md).

Each probe is what a new user might type or request: a bad value through ``train.py fit --dry_run
true`` (run in this process, as the command line runs it: ``cli_errors.run_reporting_errors``), a
module entry point with bad arguments, or an odd request to the embedded shop (Flask's test
client). A probe passes when the exit status (or HTTP status) is the expected one, the one line it
prints (the first ``error:`` line, or the page's message) says what the probe expects, and no
traceback is printed.

    python -m tests.reliability_probes [--write]  # the table of tests/results/reliability_probes.json
                                                  # (--write: into docs/reliability.md)

tests/test_reliability_probes.py runs them, writes that file and checks docs/reliability.md against it.
"""

from __future__ import annotations

import io
import json
import os
import re
import runpy
import sys
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "tests" / "results" / "reliability_probes.json"
DOC = ROOT / "docs" / "reliability.md"
QUICKSTART = ["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--dry_run", "true"]
TABLE_START, TABLE_END = "<!-- probe table: python -m tests.reliability_probes -->", "<!-- end of probe table -->"


@dataclass(frozen=True)
class Probe:
    """``kind``: cli (``train.py fit --config configs/quickstart.yaml --dry_run true`` + ``args``),
    module (``python -m args[0] args[1:]``) or shop (``args``: method, path[, form]). ``{tmp}`` in
    an argument is the probe folder. ``status``: the exit or HTTP status; ``says``: a regular
    expression the observed line must match."""

    issue: str
    kind: str
    args: tuple
    status: int
    says: str
    env: tuple = ()

    def command(self) -> str:
        if self.kind == "cli":
            return "fit --dry_run true " + " ".join(_quote(a) for a in self.args)
        if self.kind == "module":
            return "python -m " + " ".join(_quote(a) for a in self.args)
        return " ".join(str(a) if not isinstance(a, dict) else _form(a) for a in self.args)


def _quote(arg: str) -> str:
    return f"'{arg}'" if re.search(r"[\s{}\[\]*]", arg) else arg


def _form(form: dict) -> str:
    return " ".join(f"{k}={v if len(v) <= 40 else v[:20] + f'… ({len(v)} chars)'}" for k, v in form.items())


def _capture(run: Callable[[], int], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """``run``'s exit status, stdout and stderr, as a command line would end: an exception that
    escapes is printed as Python prints it (a traceback) with status 1."""
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_argv, old_env = os.getcwd(), sys.argv, dict(os.environ)
    os.chdir(cwd)
    os.environ.pop("SCPO_DEBUG", None)
    os.environ.update(env)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = run()
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what a command line would print
                traceback.print_exc()
                status = 1
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)
    return status, out.getvalue(), err.getvalue()


def _train(args: list[str]) -> int:
    import train
    from scpo_lightning.cli_errors import run_reporting_errors

    sys.argv = ["train.py"]
    return run_reporting_errors(lambda: train.main([*QUICKSTART, *args]))


def _module(args: list[str]) -> int:
    sys.argv = list(args)
    runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    return 0


def _shop(client: Any, method: str, path: str, form: dict | None = None) -> tuple[int, str]:
    if "{session}" in path:  # a fresh session of valid goal 0
        path = path.replace("{session}", client.get("/start/valid/0").headers["Location"].rsplit("/", 1)[-1])
    resp = client.open(path, method=method, data=form, follow_redirects=True)
    text = resp.get_data(as_text=True)
    return resp.status_code, text


def _page_line(html: str) -> str:
    """A page's message: the text of its <p> or heading, tags and whitespace removed."""
    text = re.sub(r"<(style|title)>.*?</\1>", " ", html, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def observed_line(status: int, out: str, err: str) -> str:
    """The one line a user reads: the first ``error:`` line, else the dry run's verdict."""
    for line in err.splitlines():
        if re.match(r"^(\S+: )?error: ", line) or line.startswith("warning: "):
            return line
    verdict = [line for line in out.splitlines() if line.startswith("[dry run]")]
    lines = verdict or [line for line in (out + err).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_probe(probe: Probe, tmp: Path, client: Any) -> dict[str, Any]:
    args = [a.replace("{tmp}", str(tmp)) if isinstance(a, str) else a for a in probe.args]
    if probe.kind == "shop":
        status, html = _shop(client, *args)
        full, line = html, _page_line(html)
    else:
        run = (lambda: _train(args)) if probe.kind == "cli" else (lambda: _module(args))
        status, out, err = _capture(run, tmp, dict(probe.env))
        full, line = out + err, observed_line(status, out, err)
        errors = [x for x in err.splitlines() if re.match(r"^(\S+: )?error: ", x)]
        if status and len(errors) != 1:
            line = f"{len(errors)} error lines: " + line
    line = line.replace(str(tmp), "<tmp>").replace(str(ROOT), "<repo>")
    line = line if len(line) <= 300 else line[:297] + "..."
    traced = "Traceback (most recent call last)" in full
    passed = status == probe.status and not traced and re.search(probe.says, line) is not None \
        and not line[:20].endswith("error lines: ")
    return {"issue": probe.issue, "command": probe.command().replace(str(ROOT), "<repo>"),
            "expected": f"{probe.status}, /{probe.says}/", "status": status, "observed": line,
            "traceback": traced, "passed": passed}


def table(results: list[dict[str, Any]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = ["| # | issue | probe | expected (status, line) | observed status | observed line | pass |",
            "|---|---|---|---|---|---|---|"]
    rows += [f"| {i} | {r['issue']} | `{cell(r['command'])}` | {cell(r['expected'])} | {r['status']} | "
             f"{cell(r['observed'])} | {'yes' if r['passed'] else 'NO'} |" for i, r in enumerate(results, 1)]
    passed = sum(r["passed"] for r in results)
    return "\n".join(rows) + f"\n\n{passed} of {len(results)} probes pass."


def main(argv: list[str] | None = None) -> None:
    from envs.common.cli_args import ArgumentParser

    parser = ArgumentParser(description="Print the probe table of tests/results/reliability_probes.json.")
    parser.add_argument("--write", action="store_true", help="write it into docs/reliability.md instead")
    shown = table(json.loads(RESULT.read_text(encoding="utf-8"))["probes"])
    if not parser.parse_args(argv).write:
        print(shown)
        return
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    DOC.write_text(f"{text[:start]}\n{shown}\n{text[end:]}", encoding="utf-8")


if __name__ == "__main__":
    main()
