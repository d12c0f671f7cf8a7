"""Scaffolding for the tests that run DVC stages in a temporary project: the environment the
stages run in, and the git + DVC repository around the project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def stage_env(project: Path, **extra: str) -> dict:
    """The environment of a temporary project's stages: this venv's bin first on PATH, the project's
    own sources on PYTHONPATH (the stages run the copy they list as dependencies, not whichever
    rscale the venv has installed), DVC analytics off, a git identity, no RSCALE_REGISTRY."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(project / "src"), "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", **extra}
    env.pop("RSCALE_REGISTRY", None)
    return env


def init_dvc_project(project: Path, env: dict, *, commit: bool = True) -> None:
    """`git init` and `dvc init` in ``project``; then (``commit``) one commit of everything in it."""
    steps = [["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]]
    if commit:
        steps += [["git", "add", "-A"], ["git", "commit", "-qm", "init"]]
    for cmd in steps:
        done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
