"""certificate.json: what was certified (the files under test, by sha256, and the
environment the target sets), by which kit, on which machine, and every scenario x seed
verdict."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
from pathlib import Path

SCHEMA_VERSION = "cnikit-certificate/1"
VERDICTS = ["holds", "violation", "inconclusive", "error"]
# Environment variables whose values certificate.json does not show: they still count in
# its identity, so two builds that differ only there differ.
SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|_KEY$|^KEY$", re.IGNORECASE)
REDACTED = "(redacted)"

# The shape of certificate.json (JSON Schema, draft 2020-12); tests validate against it.
SCHEMA = {
    "type": "object",
    "required": ["schema", "verdict", "target", "files", "kit", "machine", "runtime", "started",
                 "ended", "seconds", "summary", "runs"],
    "properties": {
        "schema": {"const": SCHEMA_VERSION},
        "verdict": {"enum": ["certified", "failed", "incomplete", "insufficient"]},
        "target": {"type": "object", "required": ["name", "version", "source", "builtin"],
                   "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                  "source": {"type": ["string", "null"]},
                                  "builtin": {"type": "boolean"},
                                  "image": {"type": ["string", "null"]},
                                  "image_digest": {"type": ["string", "null"]},
                                  "conflist": {"type": ["object", "null"]}}},
        "files": {"type": "array", "items": {
            "type": "object", "required": ["role", "path", "sha256"],
            "properties": {"role": {"type": "string"}, "path": {"type": "string"},
                           "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}},
        # sha256 of the files' hashes and every environment the target sets, unredacted:
        # one build, one identity.
        "identity": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "environment": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {"type": "string"}}},
        "kit": {"type": "object", "required": ["version", "git_commit"],
                "properties": {"version": {"type": "string"},
                               "git_commit": {"type": ["string", "null"]},
                               "git_dirty": {"type": ["boolean", "null"]}}},
        "machine": {"type": "object", "required": ["kernel", "cores"],
                    "properties": {"kernel": {"type": "string"}, "cores": {"type": "integer"}}},
        "runtime": {"type": "string"},
        "jobs": {"type": "integer", "minimum": 1},
        "shard": {"type": ["string", "null"], "pattern": "^[0-9]+/[0-9]+$"},
        "started": {"type": "string"},
        "ended": {"type": "string"},
        "seconds": {"type": "number"},
        "summary": {"type": "object",
                    "required": ["runs", "exercised", "exposed", "not_exposed", *VERDICTS],
                    "additionalProperties": {"type": "integer"}},
        "runs": {"type": "array", "items": {
            "type": "object",
            "required": ["scenario", "seed", "verdict", "seconds", "report", "precondition"],
            "properties": {"scenario": {"type": "string"}, "seed": {"type": "integer"},
                           "verdict": {"enum": VERDICTS},
                           "expected": {"type": ["string", "null"]},
                           "seconds": {"type": "number"},
                           "report": {"type": ["string", "null"]},
                           "precondition": {"type": ["string", "null"]},
                           "too_slow": {"type": ["string", "null"]},
                           "scale": {"type": ["number", "null"]},
                           "attempts": {"type": "array", "items": {
                               "type": "object", "required": ["scale", "verdict", "too_slow"],
                               "properties": {"scale": {"type": "number"},
                                              "too_slow": {"type": ["string", "null"]}}}},
                           "label": {"enum": ["exposed", "not exposed", *VERDICTS[1:]]},
                           "exposure": {"type": "object"},
                           "cost": {"type": "array", "items": {
                               "type": "object",
                               "required": ["kind", "subject", "count", "since", "what"]}},
                           "evidence": {"type": "array", "items": {"type": "string"}}}}},
    },
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def kit_identity() -> dict:
    """The kit's version and, when it runs from a git checkout, the commit (and whether the
    tree had changes): a certificate must say which kit judged the build."""
    from cnikit import __version__
    from faultcore.version import checkout

    commit, dirty = checkout(Path(__file__).resolve().parents[1]) or (None, None)
    return {"version": __version__, "git_commit": commit, "git_dirty": dirty}


def machine() -> dict:
    return {"kernel": platform.release(), "cores": os.cpu_count() or 1,
            "arch": platform.machine(), "python": platform.python_version()}


def image_digest(image: str | None) -> str | None:
    if not image:
        return None
    from cnikit.containers.podman import Podman

    try:
        info = Podman().out("image", "inspect", "--format", "{{.Digest}} {{.Id}}", image)
    except Exception:  # noqa: BLE001 - no podman, no such image: the certificate says null
        return None
    digest, _, image_id = info.strip().partition(" ")
    return digest if digest.startswith("sha256:") else (f"sha256:{image_id}" if image_id else None)


def files(target) -> list[dict]:
    out = []
    for role, path in sorted(target.files_under_test().items()):
        p = Path(path)
        out.append({"role": role, "path": str(p), "sha256": sha256(p)})
    return out


def environment(target) -> dict[str, dict[str, str]]:
    """role -> the environment the target sets for it, secrets-looking values redacted."""
    return {role: {k: REDACTED if SECRET_NAME.search(k) else v for k, v in sorted(env.items())}
            for role, env in sorted(target.environments().items())}


def identity(target, hashed: list[dict]) -> str:
    """One hash for the build: every file's (the target file, the daemon, the plugins, the
    components, [build] files) and every environment, secrets included."""
    doc = {"files": sorted((f["role"], f["sha256"]) for f in hashed),
           "environment": target.environments()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def summary(cert) -> dict:
    """How many runs there were, exercised the build, exposed it, and of each verdict."""
    from cnikit.check.exposure import label

    out = {"runs": len(cert.runs),
           "exercised": sum(1 for r in cert.runs if r.get("exercised")),
           "exposed": cert.exposed,
           "not_exposed": sum(1 for r in cert.runs
                              if label(r["verdict"], r.get("exposure")) == "not exposed"),
           "too_slow": len(cert.too_slow),
           # Runs judged only at a slower time scale (cnikit.scenarios.engine.adapt).
           "slowed": sum(1 for r in cert.runs if r.get("attempts")),
           # Runs whose build wasted EC2 calls or ENIs (cnikit.check.cost): not a verdict.
           "cost": sum(1 for r in cert.runs if r.get("cost"))}
    for v in VERDICTS:
        out[v] = cert.count(v)
    return out


def build(cert) -> dict:
    t = cert.target
    summary_ = summary(cert)
    hashed = files(t)
    return {
        "schema": SCHEMA_VERSION,
        "verdict": cert.verdict,
        "target": {"name": t.name, "version": t.version,
                   "source": str(t.source) if t.source else None, "builtin": bool(t.builtin),
                   "image": t.image, "image_digest": image_digest(t.image),
                   "conflist": t.conflist},
        "files": hashed,
        "identity": identity(t, hashed),
        "environment": environment(t),
        "kit": kit_identity(),
        "machine": machine(),
        "runtime": cert.runtime,
        "jobs": cert.jobs,
        "shard": f"{cert.shard[0]}/{cert.shard[1]}" if cert.shard else None,
        "started": _iso(cert.started),
        "ended": _iso(cert.ended),
        "seconds": round(cert.ended - cert.started, 1),
        "summary": summary_,
        "runs": cert.runs,
    }


def write(out_dir: Path, document: dict) -> Path:
    path = Path(out_dir) / "certificate.json"
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return path
