"""One virtual environment per framework, under a cache directory outside the repository.

Environments are made with ``uv`` (installed into ``CACHE/tools`` from PyPI on first use): ``uv`` hard-links
one copy of torch into every environment, where pip would unpack the 3 GB CUDA wheel five times. The pins are
the versions this check last ran with (RESULTS.md); ``--upgrade`` on ``check.py`` drops them. Megatron-LM's
``megatron/training`` (the argument parser and ``validate_args``) is not in the ``megatron-core`` wheel, so its
sources come from a Git checkout at ``MEGATRON_COMMIT``: ``git archive`` of a local clone (``--megatron-git``),
else a shallow fetch from GitHub.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TORCH = "torch==2.13.0"
# vLLM pins its own torch (2.13.0 for vllm 0.32.0); the others share it so that uv links one copy.
PACKAGES: dict[str, list[str]] = {
    "vllm": ["vllm==0.32.0"],
    "deepspeed": [TORCH, "deepspeed==0.19.8"],
    # 0.2.2: the last torchtitan release with TOML job configs (ConfigManager), what the export writes
    "torchtitan": [TORCH, "torchtitan==0.2.2"],
    "flexgen": [TORCH, "flexgen==0.1.8"],
    # megatron/training/arguments.py and megatron/core import these at parse time
    "megatron": [TORCH, "numpy", "packaging", "pyyaml", "einops"],
}
UNPINNED = {"vllm": ["vllm"], "deepspeed": [TORCH, "deepspeed"], "torchtitan": [TORCH, "torchtitan==0.2.*"],
            "flexgen": [TORCH, "flexgen"], "megatron": PACKAGES["megatron"]}
PYTHON = {"megatron": "3.12"}  # Megatron-LM main imports typing.override (Python 3.12)
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"  # the commit tests/data/export/megatron_flags.json lists
MEGATRON_URL = "https://github.com/NVIDIA/Megatron-LM.git"
DEFAULT_CACHE = Path(os.environ.get("SHARDPLAN_FRAMEWORKS_CACHE", "~/.cache/shardplan-frameworks")).expanduser()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("UV_CACHE_DIR", str(DEFAULT_CACHE / "uv-cache"))
    env.setdefault("UV_PYTHON_PREFERENCE", "system")  # an installed interpreter first (no download needed)
    if Path("/etc/ssl/certs/ca-certificates.crt").exists():
        env.setdefault("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
        env.setdefault("UV_SYSTEM_CERTS", "1")
    return env


def uv(cache: Path) -> Path:
    """The ``uv`` binary, installed into ``cache/tools`` on first use."""
    tools = cache / "tools"
    exe = tools / "bin" / "uv"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    return exe


def interpreter(version: str) -> str:
    """An installed Python ``version`` (a pyenv build counts), else the version for uv to find or download."""
    import glob
    import shutil

    exe = shutil.which(f"python{version}")
    if exe and subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
        return exe
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    return found[-1] if found else version


def python(cache: Path, name: str) -> Path:
    return cache / name / "bin" / "python"


def ensure(cache: Path, name: str, *, upgrade: bool = False) -> tuple[bool, str]:
    """Create ``cache/name`` with the framework installed; (ok, last lines of the installer's output)."""
    venv = cache / name
    marker = venv / ".shardplan-installed"
    if marker.exists() and not upgrade:
        return True, marker.read_text()
    exe = uv(cache)
    if not python(cache, name).exists():
        py = interpreter(PYTHON.get(name, "3.11"))
        subprocess.run([str(exe), "venv", "-q", "-p", py, str(venv)], check=True, env=_env())
    pkgs = (UNPINNED if upgrade else PACKAGES)[name]
    r = subprocess.run([str(exe), "pip", "install", *pkgs], capture_output=True, text=True,
                       env=_env() | {"VIRTUAL_ENV": str(venv)})
    log = (r.stdout + r.stderr).strip().splitlines()
    if r.returncode != 0:
        return False, "\n".join(log[-15:])
    marker.write_text(" ".join(pkgs) + "\n")
    return True, " ".join(pkgs)


def megatron_sources(cache: Path, git_dir: str | None) -> Path:
    """Megatron-LM's ``megatron/`` package at ``MEGATRON_COMMIT``, unpacked under ``cache``; the directory to put
    on ``PYTHONPATH``."""
    dest = cache / f"megatron-lm-{MEGATRON_COMMIT[:12]}"
    if (dest / "megatron" / "training" / "arguments.py").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    if git_dir is None:
        git_dir = str(cache / "megatron-lm.git")
        if not Path(git_dir).exists():
            subprocess.run(["git", "init", "-q", "--bare", git_dir], check=True)
        subprocess.run(["git", "--git-dir", git_dir, "fetch", "-q", "--depth", "1", MEGATRON_URL, MEGATRON_COMMIT],
                       check=True)
    archive = subprocess.run(["git", "--git-dir", git_dir, "archive", MEGATRON_COMMIT, "megatron"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def versions(cache: Path, name: str, dists: list[str]) -> dict[str, str]:
    """Installed versions of ``dists`` in the environment ``name``."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for d in sys.argv[1:]:\n"
            "    try: out[d] = m.version(d)\n"
            "    except m.PackageNotFoundError: out[d] = None\n"
            "print(json.dumps(out))")
    r = subprocess.run([str(python(cache, name)), "-c", code, *dists], capture_output=True, text=True)
    import json

    return json.loads(r.stdout) if r.returncode == 0 else {}
