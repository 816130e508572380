"""The kit's own detection power: plant each bug of bench/mutants.py, one at a time, in a copy
of the reference daemon, certify the copy's hardened build, and count the bugs caught.

A mutant is caught when certification does not certify it (a violation, liveness included).
One that certifies is still flagged when its certification shows waste (cnikit.check.cost: a
stream of refused EC2 calls, ENIs freed unused) in a run whose unmodified counterpart showed
none of that kind: a bug that hurts no pod and only spends the account's EC2 budget, which
no verdict may fail a design for (upstream #1148, #1451). Both count as detected; the JSON
says which is which. A run the kit could not complete (`error`) is no catch: it is reported
apart. The unmodified daemon goes through the same path first (the baseline): it must
certify (no false alarm).

The whole benchmark measures one tree: the kit's packages are taken once from the last
commit (a snapshot), and each certification runs in a worker process (this script, from the
snapshot, with --worker) through cnikit.certify's Python API, so scenarios and checkers stay
the same while the checkout changes. The daemon under test is a copy of the snapshot's
package with one bug planted: the target file runs `python -P -m cnikit.cli daemon` with
PYTHONPATH set to the copy first, so that daemon, and only it, imports the mutant.

    bench/bench_detection.py [--quick] [--jobs N] [--seeds N] [--stop-at-first] [--mutant NAME ...]

A mutant of category "ipv6" breaks the daemon's IPv6 mode: its target declares
`ip_family = "ipv6"`, so certification runs the IPv6 scenarios in a dual-stack VPC with
upstream's IPv6 settings (ENABLE_IPv6=true ...). The baseline runs every family its mutants
do (`ip_family = "dual"` when there are both).

`--quick`: a few mutants and two scenarios. `--stop-at-first`: a mutant's certification
ends at its first violation (faster; the table then names the first scenario that caught it).
Prints one JSON object on stdout (figures, the per-mutant table, goal, whether met); progress
on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from mutants import BY_NAME, IPV6, MUTANTS, QUICK, QUICK_SCENARIOS, Mutant  # noqa: E402

from cnikit.certify.suite import DEFAULT_SEEDS  # noqa: E402

GOAL = 0.95
BASELINE = "baseline"
PACKAGE = "cnikit"  # what a mutant's copy holds
KIT = ("cnikit", "fault_imds", "faultcore", "bench")  # what the snapshot holds
CERTIFY_TIMEOUT_S = 45 * 60  # one certification, whatever the build does

_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(msg, file=sys.stderr, flush=True)


# ---- the copy of the daemon -------------------------------------------------------------

def snapshot(dest: Path, worktree: bool = False) -> str | None:
    """The kit's packages as last committed, into dest, once: the baseline, every mutant and
    the kit judging them come from this same tree however long the benchmark runs. Returns
    the commit (None outside a git checkout: then the files as they are; `worktree`: the
    files as they are in any case, uncommitted changes included)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if worktree:
            raise OSError("the work tree, as it is")
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True, timeout=30).stdout.strip()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "--",
                                  *KIT], capture_output=True, check=True, timeout=120).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=120)
        return commit
    except (OSError, subprocess.SubprocessError):
        for name in KIT:
            shutil.copytree(ROOT / name, dest / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "results"))
        return None


def search_path(copy: Path, pristine: Path) -> str:
    """The daemon's PYTHONPATH: the mutant's package first, the rest of the snapshot after."""
    return f"{copy}{os.pathsep}{pristine}"


def make_copy(pristine: Path, dest: Path, mutant: Mutant | None) -> None:
    """The snapshot into dest, with the mutant's bug planted (ValueError if it cannot be)."""
    shutil.copytree(pristine / PACKAGE, dest / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if mutant is not None:
        path = dest / mutant.file
        path.write_text(mutant.apply(path.read_text()))


def copy_is_imported(copy: Path, pristine: Path, mutant: Mutant | None) -> str | None:
    """None when a daemon started as the target starts it imports the copy (the mutated
    module included); otherwise why not."""
    module = (mutant.file if mutant else "cnikit/daemon/ipamd.py").removesuffix(".py")
    module = module.replace("/", ".")
    probe = ("import importlib, sys; import cnikit.cli; "
             "print(importlib.import_module(sys.argv[1]).__file__)")
    env = {**os.environ, "PYTHONPATH": search_path(copy, pristine)}
    r = subprocess.run([sys.executable, "-P", "-c", probe, module], env=env, cwd=pristine,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"the copy does not import: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    if not Path(r.stdout.strip()).resolve().is_relative_to(copy.resolve()):
        return f"{module} came from {r.stdout.strip()}, not from the copy"
    return None


_PLUGINS: dict[Path, str] = {}


def plugin_binary(pristine: Path) -> str:
    """The snapshot's CNI plugin (unchanged: the bugs are the daemon's), made from the
    snapshot as `make setup` makes the venv's: the venv's plugin is built from the checkout
    it was set up from, which may predate the snapshot (a worktree's branch that changed
    what the plugin sends the daemon measured main's plugin). The venv's when that fails."""
    if pristine not in _PLUGINS:
        bin_dir = pristine / "bin"
        bin_dir.mkdir(exist_ok=True)
        try:
            r = subprocess.run([sys.executable, "-P", "-m", "cnikit.plugin.launcher",
                                str(bin_dir)], env={**os.environ, "PYTHONPATH": str(pristine)},
                               cwd=pristine, capture_output=True, text=True, timeout=600)
            made = r.returncode == 0 and (bin_dir / "cnikit-cni").exists()
        except (OSError, subprocess.SubprocessError):
            made = False
        here = Path(sys.executable).parent / "cnikit-cni"
        venv = str(here) if here.exists() else (shutil.which("cnikit-cni") or str(here))
        _PLUGINS[pristine] = str(bin_dir / "cnikit-cni") if made else venv
    return _PLUGINS[pristine]


def family_of(mutant: Mutant) -> str:
    """The address family a mutant is certified in: its bug's."""
    return "ipv6" if mutant.category == IPV6 else "ipv4"


def baseline_family(planted: list[Mutant]) -> str:
    """The unmodified daemon's family: every one the mutants are certified in."""
    families = {family_of(m) for m in planted} or {"ipv4"}
    return "dual" if len(families) > 1 else families.pop()


def write_target(copy: Path, pristine: Path, name: str, ip_family: str = "ipv4") -> Path:
    """The hardened reference daemon as a target file, running the copy, certified in
    ip_family ("ipv4", "ipv6": its IPv6 mode, or "dual": both)."""
    command = [sys.executable, "-P", "-m", "cnikit.cli", "daemon", "--state-dir", "{state_dir}"]
    s = json.dumps  # a JSON string is a TOML basic string
    text = "\n".join([
        f"name = {s(name)}",
        'version = "mutant"',
        f"ip_family = {s(ip_family)}",
        "[daemon]",
        f"command = [{', '.join(s(a) for a in command)}]",
        f'env = {{ CNIKIT_PROFILE = "hardened", PYTHONPATH = {s(search_path(copy, pristine))} }}',
        'ready = { socket = "{state_dir}/ipamd.sock", timeout = 60 }',
        "[plugin]",
        f"binaries = [{s(plugin_binary(pristine))}]",
        'conflist = { cniVersion = "1.0.0", name = "aws-cni", plugins = [ { type = "cnikit-cni", '
        'daemonSocket = "{state_dir}/ipamd.sock" } ] }',
        "[observe]",
        "introspection = 61679",
        "metrics = 61678",
        "",
    ])
    path = copy / "target.toml"
    path.write_text(text)
    return path


# ---- one certification in a worker process ----------------------------------------------

class _Caught(Exception):
    pass


def worker(target: str, report: str, only: list[str], stop_at_first: bool, seeds: int) -> int:
    """Certify `target`, one JSON line per run on stdout, then {"verdict": ...}."""
    import logging

    from cnikit.certify import certify
    from cnikit.errors import CnikitError

    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("fault_imds").setLevel(logging.CRITICAL)
    import cnikit

    print(f"kit: {Path(cnikit.__file__).parent}", file=sys.stderr, flush=True)

    def interrupt(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # the run tears down what it made

    def on_result(rec: dict, k: int, n: int) -> None:
        keep = ("scenario", "seed", "verdict", "seconds", "precondition", "error", "evidence",
                "cost")
        print(json.dumps({"run": {f: rec.get(f) for f in keep}, "k": k, "n": n}), flush=True)
        if stop_at_first and rec["verdict"] == "violation":
            raise _Caught

    try:
        cert = certify(target, seeds=seeds, report_dir=report, only=only or None,
                       on_result=on_result)
        print(json.dumps({"verdict": cert.verdict}), flush=True)
    except _Caught:
        print(json.dumps({"verdict": "failed", "stopped": True}), flush=True)
    except CnikitError as e:
        print(json.dumps({"fatal": str(e)}), flush=True)
        return 2
    return 0


def certify_in_worker(label: str, pristine: Path, target: Path, report: Path, only: list[str],
                      stop_at_first: bool, timeout: float, seeds: int) -> dict:
    script = pristine / "bench" / Path(__file__).name
    cmd = [sys.executable, str(script), "--worker", str(target), str(report),
           "--stop-at-first" if stop_at_first else "--all", "--seeds", str(seeds)]
    for s in only:
        cmd += ["--scenario", s]
    runs: list[dict] = []
    out = {"runs": runs, "verdict": None, "fatal": None, "stopped": False}
    with open(report.parent / "worker.log", "w") as log:
        # The kit from the snapshot: this process and whatever it starts (-m included).
        env = {**os.environ, "PYTHONPATH": str(pristine)}
        proc = subprocess.Popen(cmd, cwd=pristine, env=env, stdout=subprocess.PIPE, stderr=log,
                                text=True, start_new_session=True)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _kill_group(proc, signal.SIGTERM)

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "run" in msg:
                    r = msg["run"]
                    runs.append(r)
                    say(f"  {label}: [{msg['k']}/{msg['n']}] {r['scenario']}: {r['verdict']} "
                        f"{r['seconds']:.1f}s")
                else:
                    out.update(msg)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                _kill_group(proc, signal.SIGKILL)
                proc.wait()
        finally:
            timer.cancel()
    if out["verdict"] is None and not out["fatal"]:
        out["fatal"] = (f"certification timed out after {timeout:.0f}s" if expired.is_set()
                        else f"worker exited {proc.returncode} ({report.parent / 'worker.log'})")
    return out


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---- one mutant (or the baseline) ---------------------------------------------------------

def judge(result: dict) -> tuple[str, list[str]]:
    """(caught | escaped | error, the scenarios that caught it)."""
    caught_by = [r["scenario"] for r in result["runs"] if r["verdict"] == "violation"]
    if caught_by:
        return "caught", caught_by
    if result["fatal"] or any(r["verdict"] == "error" for r in result["runs"]):
        return "error", []
    return "escaped", []


def evaluate(mutant: Mutant | None, pristine: Path, workdir: Path, only: list[str],
             stop_at_first: bool, timeout: float, seeds: int, family: str = "ipv4") -> dict:
    """family: the baseline's (a mutant is certified in its own)."""
    name = mutant.name if mutant else BASELINE
    family = family_of(mutant) if mutant else family
    row: dict = {"name": name, "ip_family": family}
    if mutant:
        row.update(category=mutant.category, file=mutant.file, why=mutant.why)
    t0 = time.monotonic()
    copy = workdir / name
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    try:
        make_copy(pristine, copy, mutant)
        problem = copy_is_imported(copy, pristine, mutant)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        problem = str(e)
    if problem:
        row.update(outcome="error", error=problem, caught_by=[], verdicts={},
                   seconds=round(time.monotonic() - t0, 1))
        say(f"{name}: error: {problem}")
        return row
    target = write_target(copy, pristine, f"mutant-{name}", family)
    result = certify_in_worker(name, pristine, target, copy / "report", only, stop_at_first,
                               timeout, seeds)
    outcome, caught_by = judge(result)
    row.update(outcome=outcome, caught_by=caught_by, certification=result["verdict"],
               verdicts={r["scenario"]: r["verdict"] for r in result["runs"]},
               seconds=round(time.monotonic() - t0, 1))
    inconclusive = {r["scenario"]: r["precondition"] for r in result["runs"]
                    if r["verdict"] == "inconclusive"}
    if inconclusive:
        row["inconclusive"] = inconclusive
    if result["stopped"]:
        row["stopped_at_first_catch"] = True
    errors = {r["scenario"]: r["error"] for r in result["runs"] if r["verdict"] == "error"}
    if result["fatal"]:
        errors["certification"] = result["fatal"]
    if errors:
        row["errors"] = errors
    first = next((r for r in result["runs"] if r["verdict"] == "violation"), None)
    if first:
        row["evidence"] = (first.get("evidence") or [])[:2]
    cost = {f"{r['scenario']} seed {r['seed']}": r["cost"] for r in result["runs"] if r.get("cost")}
    if cost:
        row["cost"] = cost
    shown = {"caught": "FALSE ALARM", "escaped": "certified"}.get(outcome, outcome) \
        if mutant is None else outcome
    say(f"{name}: {shown}" + (f" by {', '.join(caught_by)}" if caught_by else "")
        + f" ({row['seconds']:.0f}s)")
    return row


# ---- the benchmark ----------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few mutants, two scenarios")
    ap.add_argument("--jobs", type=int, default=1, help="certifications at once (default 1)")
    ap.add_argument("--mutant", action="append", default=[], help="only these mutants")
    ap.add_argument("--scenario", action="append", default=[], help="only these scenarios")
    ap.add_argument("--stop-at-first", action="store_true",
                    help="end a mutant's certification at its first violation")
    ap.add_argument("--all", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help="keep the copies and their reports here")
    ap.add_argument("--worktree", action="store_true",
                    help="measure the checkout as it is, uncommitted changes included (a "
                         "scenario or a mutant not committed yet), not its last commit")
    ap.add_argument("--timeout", type=float, default=CERTIFY_TIMEOUT_S,
                    help="seconds for one certification")
    ap.add_argument("--seeds", type=int, default=DEFAULT_SEEDS,
                    help=f"random-chaos seeds per certification (default {DEFAULT_SEEDS}, "
                         "as `cnikit certify`)")
    ap.add_argument("--worker", nargs=2, metavar=("TARGET", "REPORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], args.worker[1], args.scenario, args.stop_at_first,
                      args.seeds)

    out: dict = {"bench": "detection", "quick": args.quick, "profile": "hardened",
                 "seeds": args.seeds}
    unknown = [n for n in args.mutant if n not in BY_NAME]
    if unknown or args.jobs < 1 or args.seeds < 1:
        print(f"bench_detection: unknown mutant {unknown[0]!r}" if unknown
              else "bench_detection: --jobs and --seeds must be at least 1", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        out.update(error="needs root (network namespaces)", goal_met=False)
        print(json.dumps(out))
        return 0
    from cnikit import scenarios

    planted = [BY_NAME[n] for n in args.mutant] if args.mutant else (
        [BY_NAME[n] for n in QUICK] if args.quick else list(MUTANTS))
    # Empty: every scenario of the snapshot (the worker's certify default).
    only = args.scenario or (list(QUICK_SCENARIOS) if args.quick else [])
    for s in only:
        scenarios.get(s)  # an unknown name fails before anything starts
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="cnikit-mutants-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"detection: baseline + {len(planted)} mutants x {len(only) or 'all'} scenarios, "
        f"{args.jobs} at a time, in {workdir}")
    t0 = time.monotonic()
    pristine = workdir / "_pristine"
    commit = snapshot(pristine, worktree=args.worktree)
    out["kit_commit"] = commit
    out["worktree"] = args.worktree
    done = [0]

    base_family = baseline_family(planted)
    out["baseline_ip_family"] = base_family

    def one(m: Mutant | None) -> dict:
        row = evaluate(m, pristine, workdir, only, args.stop_at_first, args.timeout,
                       args.seeds, base_family)
        with _print_lock, open(workdir / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")  # what a long run has found so far
        done[0] += 1
        say(f"[{done[0]}/{len(planted) + 1}] done")
        return row

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(one, [None, *planted]))
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    base, table = rows[0], rows[1:]
    for r in table:
        flag(r, base)
    count = {o: sum(1 for r in table if r["outcome"] == o)
             for o in ("caught", "flagged", "escaped", "error")}
    detected = count["caught"] + count["flagged"]
    share = detected / len(table) if table else 0.0
    judged = len(table) - count["error"]
    # The unmodified daemon must certify; a violation there is a false alarm.
    false_alarm = base["outcome"] == "caught"
    out.update({
        "scenarios": only or sorted(base.get("verdicts") or {}),
        "stop_at_first": args.stop_at_first,
        "jobs": args.jobs,
        "planted": len(table),
        **count,
        "detection_share": round(share, 3),
        "detection_share_of_judged": round(detected / judged, 3) if judged else None,
        "baseline": {"certification": base.get("certification"),
                     "verdicts": base.get("verdicts"), "false_alarm": false_alarm,
                     **({"errors": base["errors"]} if base.get("errors") else {}),
                     **({"evidence": base["evidence"]} if base.get("evidence") else {}),
                     **({"cost": base["cost"]} if base.get("cost") else {})},
        "by_category": _by_category(table),
        "escaped_mutants": [r["name"] for r in table if r["outcome"] == "escaped"],
        "mutants": table,
        "seconds": round(time.monotonic() - t0, 1),
        "goal": f">= {GOAL:.0%} of planted bugs caught by the certification suite (a "
                "violation, or waste the unmodified daemon's runs did not show; an error is no "
                "catch), and the unmodified daemon certifies",
        "goal_met": bool(table) and share >= GOAL and base["outcome"] == "escaped",
    })
    print(json.dumps(out))
    return 0


def flag(row: dict, base: dict) -> None:
    """An escaped mutant whose runs wasted what the baseline's same runs did not (a cost
    finding of a kind the unmodified daemon's run of that scenario and seed did not have)
    is `flagged`, by those runs."""
    if row["outcome"] != "escaped":
        return
    seen = {(run, f["kind"]) for run, found in (base.get("cost") or {}).items() for f in found}
    new = {run: [f for f in found if (run, f["kind"]) not in seen]
           for run, found in (row.get("cost") or {}).items()}
    new = {run: found for run, found in new.items() if found}
    if new:
        row["outcome"] = "flagged"
        row["flagged_by"] = {run: [f"{f['kind']}: {f['what']}" for f in found]
                             for run, found in new.items()}
        say(f"{row['name']}: flagged (cost) by {', '.join(new)}")


def _by_category(table: list[dict]) -> dict:
    cats: dict[str, dict] = {}
    for r in table:
        c = cats.setdefault(r["category"], {"planted": 0, "caught": 0, "flagged": 0})
        c["planted"] += 1
        c["caught"] += r["outcome"] == "caught"
        c["flagged"] += r["outcome"] == "flagged"
    return cats


if __name__ == "__main__":
    sys.exit(main())
