"""Framework check: shardplan's exports run through each target framework's own configuration code.

    python benchmarks/frameworks/check.py                    # everything (installs on first run: ~15 GB)
    python benchmarks/frameworks/check.py --only megatron,torchtitan
    python benchmarks/frameworks/check.py --no-generate      # reuse benchmarks/frameworks/exports/

1. Generates the exports with the shardplan CLI (``cases.py``) into ``benchmarks/frameworks/exports/``, each with
   the plan it was written for (``*.plan.json``).
2. Creates one virtual environment per framework under ``~/.cache/shardplan-frameworks`` (``envs.py``).
3. Runs ``checkers/<framework>_check.py`` inside that environment on the exports: Megatron-LM ``parse_args`` and
   ``validate_args``, ``DeepSpeedConfig``, torchtitan's ``ConfigManager``, ``ParallelDims`` and pipeline split,
   vLLM's ``serve`` parser and ``EngineArgs``, FlexGen's parser, ``Policy`` and ``OptLM`` placement rules.
4. Writes ``RESULTS.md`` and ``results.json`` beside this file.

Not part of CI: it needs the network for PyPI and many GB of disk. Needs ``shardplan`` importable by this
interpreter (run it with the repository's ``.venv/bin/python``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import envs  # noqa: E402
import report  # noqa: E402
from cases import CASES, CONTROLS, SUFFIX  # noqa: E402

EXPORTS = HERE / "exports"
SHARDPLAN = str(Path(sys.executable).parent / "shardplan")  # the console script beside this interpreter
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "vllm", "flexgen")
DISTS = {"megatron": ["torch", "numpy"], "deepspeed": ["deepspeed", "torch", "pydantic"],
         "torchtitan": ["torchtitan", "torch"], "vllm": ["vllm", "torch", "transformers"],
         "flexgen": ["flexgen", "torch", "transformers"]}


def _num_layers(argv: tuple[str, ...]) -> int:
    """Transformer layers of the case's model (``-m``), from shardplan's catalog."""
    from shardplan.models import resolve_model

    return resolve_model(argv[argv.index("-m") + 1]).num_layers


def _stage_layers(plan: dict, num_layers: int) -> list[int]:
    """Layers per pipeline rank the plan costs: its per-stage split, else the cost model's even split."""
    from shardplan.costmodel.training.pipeline_sim import uniform_split

    return plan.get("stage_layers") or uniform_split(num_layers, plan["pp"])


def generate(only: set[str]) -> list[dict]:
    """Run shardplan for every (case, format); write the export and the plan; return the manifest."""
    EXPORTS.mkdir(exist_ok=True)
    manifest = []
    for case in CASES:
        for fmt in case.formats:
            if fmt not in only:
                continue
            stem = f"{case.name}.{fmt}"
            out = EXPORTS / f"{stem}.{SUFFIX[fmt]}"
            argv = [SHARDPLAN, case.command, *case.argv, "--export", fmt, "-o", str(out),
                    "--json"]
            t0 = time.perf_counter()
            r = subprocess.run(argv, capture_output=True, text=True)
            entry = {"case": case.name, "format": fmt, "why": case.why, "command":
                     " ".join(["shardplan", case.command, *case.argv, "--export", fmt]),
                     "shardplan_seconds": round(time.perf_counter() - t0, 2), "exit": r.returncode,
                     "notes": [ln.removeprefix("shardplan: note: ") for ln in r.stderr.splitlines()
                               if ln.strip() and not ln.startswith("shardplan: wrote ")]}
            if r.returncode == 0:
                result = json.loads(r.stdout)
                entry["plan"] = result.get("plan")
                entry["num_layers"] = _num_layers(case.argv)
                if case.command == "train":
                    entry["stage_layers"] = _stage_layers(entry["plan"], entry["num_layers"])
                entry["export"] = str(out.relative_to(HERE))
                (EXPORTS / f"{stem}.plan.json").write_text(json.dumps(
                    {k: v for k, v in entry.items() if k != "export"}, indent=1) + "\n")
            else:
                out.unlink(missing_ok=True)
                entry["refused"] = r.stderr.strip()
            manifest.append(entry)
            print(f"  {stem}: exit {r.returncode}", file=sys.stderr)
    old = EXPORTS / "manifest.json"
    kept = [e for e in json.loads(old.read_text()) if e["format"] not in only] if old.exists() else []
    old.write_text(json.dumps(kept + manifest, indent=1) + "\n")
    return manifest


def controls(manifest: list[dict], only: set[str]) -> tuple[list[dict], list[dict]]:
    """Broken copies of exports (``cases.CONTROLS``) written to exports/controls/: entries to check, and results for
    controls whose pattern no longer matches its export (not applicable)."""
    by_key = {f"{e['case']}.{e['format']}": e for e in manifest if "export" in e}
    (EXPORTS / "controls").mkdir(exist_ok=True)
    entries, skipped = [], []
    for c in CONTROLS:
        src = by_key.get(c.source)
        if src is None or src["format"] not in only:
            continue
        text, n = re.subn(c.pattern, c.repl, (HERE / src["export"]).read_text(), flags=re.M)
        name = f"control:{c.name}"
        if n == 0:
            skipped.append({"case": name, "format": src["format"], "status": "not applicable", "control": c.expect,
                            "message": f"{c.pattern!r} no longer matches {src['export']}"})
            continue
        path = EXPORTS / "controls" / f"{c.name}.{SUFFIX[src['format']]}"
        path.write_text(text)
        entries.append(src | {"case": name, "export": str(path.relative_to(HERE)), "control": c.expect,
                              "why": c.why})
    return entries, skipped


def run_checker(cache: Path, fw: str, entries: list[dict], megatron_src: Path | None) -> list[dict]:
    """Run checkers/<fw>_check.py in the framework's environment; one result per entry."""
    todo = [e | {"path": str(HERE / e["export"])} for e in entries if "export" in e]
    if not todo:
        return []
    env = None
    if fw == "megatron":
        import os

        env = dict(os.environ) | {"PYTHONPATH": str(megatron_src)}
    r = subprocess.run([str(envs.python(cache, fw)), str(HERE / "checkers" / f"{fw}_check.py")],
                       input=json.dumps(todo), capture_output=True, text=True, env=env, timeout=3600)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-12:])
        return [{"case": e["case"], "format": fw, "status": "error", "message": f"checker crashed: {tail}"}
                for e in todo]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=envs.DEFAULT_CACHE)
    ap.add_argument("--only", default=",".join(FRAMEWORKS), help="comma-separated frameworks")
    ap.add_argument("--no-generate", action="store_true", help="reuse exports/ (manifest.json)")
    ap.add_argument("--no-install", action="store_true", help="use the environments as they are")
    ap.add_argument("--upgrade", action="store_true", help="newest releases instead of the pins in envs.py")
    ap.add_argument("--megatron-git", help="a local Megatron-LM Git directory holding envs.MEGATRON_COMMIT")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if not only <= set(FRAMEWORKS):
        ap.error(f"--only: choose from {', '.join(FRAMEWORKS)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((EXPORTS / "manifest.json").read_text()) if args.no_generate else generate(only)
    manifest = [e for e in manifest if e["format"] in only]
    previous = json.loads((HERE / "results.json").read_text()) if (HERE / "results.json").exists() else {}
    checks, results_na = controls(manifest, only)
    frameworks = {k: v for k, v in previous.get("frameworks", {}).items() if k not in only}
    results = [r for r in previous.get("results", []) if r["format"] not in only]
    for fw in FRAMEWORKS:
        if fw not in only:
            continue
        print(f"{fw}: environment", file=sys.stderr)
        ok, log = (True, "") if args.no_install else envs.ensure(args.cache, fw, upgrade=args.upgrade)
        info: dict = {"installed": ok}
        if not ok:
            info["install_error"] = log
            frameworks[fw] = info
            results += [{"case": e["case"], "format": fw, "status": "not installed", "message": log.splitlines()[-1]}
                        for e in manifest if e["format"] == fw]
            continue
        src = None
        if fw == "megatron":
            src = envs.megatron_sources(args.cache, args.megatron_git)
            info["commit"] = envs.MEGATRON_COMMIT
        info["versions"] = envs.versions(args.cache, fw, DISTS[fw])
        frameworks[fw] = info
        print(f"{fw}: checking", file=sys.stderr)
        results += run_checker(args.cache, fw, [e for e in manifest + checks if e["format"] == fw], src)
    expect = {e["case"]: e["control"] for e in checks}
    for r in results:
        if r["case"] in expect:
            r["control"] = expect[r["case"]]
    results += results_na
    for e in manifest:
        if "refused" in e:
            results.append({"case": e["case"], "format": e["format"], "status": "not exported",
                            "message": e["refused"]})
    data = {"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "frameworks": frameworks,
            "exports": {f"{e['case']}.{e['format']}": e for e in manifest} | {
                k: v for k, v in previous.get("exports", {}).items() if v["format"] not in only},
            "results": sorted(results, key=lambda r: (r["format"], r["case"]))}
    (HERE / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (HERE / "RESULTS.md").write_text(report.markdown(data))
    real = [r for r in data["results"] if "control" not in r]
    bad = [r for r in real if r["status"] != "accepted"]
    failed = [r["case"] for r in data["results"] if "control" in r and r["status"] != r["control"]]
    print(f"{len(real) - len(bad)} accepted, {len(bad)} not; controls not caught: {failed or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
