"""`pip install --no-index --no-build-isolation ./python` works with no
package index: into a venv of this python3 (made with
--system-site-packages, for Debian's setuptools and wheel), from a copy of
python/ (pip builds in the tree it is given), and the installed package
runs README's example against the built library."""
import os
import shutil
import subprocess
import sys

import pytest

import walrus

EXAMPLE = """
import sys, walrus
with walrus.open(sys.argv[1], create_if_missing=True) as db:
    db.put(b"hello", b"world")
    print(db.get(b"hello").decode(), walrus.__file__)
walrus.stop(sys.argv[1])
"""


def test_pip_install_without_an_index(tmp, data_dir):
    if os.environ.get("WALRUS_TEST_INSTALLED"):
        pytest.skip("testing an installed binding already")
    src = os.path.join(tmp, "src")
    here = os.path.dirname(os.path.dirname(os.path.abspath(walrus.__file__)))
    shutil.copytree(here, src, ignore=shutil.ignore_patterns(
        "tests", "build", "*.egg-info", "__pycache__"))
    venv = os.path.join(tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True,
                   capture_output=True, timeout=300)
    py = os.path.join(venv, "bin", "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                        "--disable-pip-version-check", src],
                       capture_output=True, timeout=300, env=env, cwd=tmp)
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")
    env["WALRUS_LIBRARY"] = walrus.library_path
    r = subprocess.run([py, "-c", EXAMPLE, data_dir], capture_output=True,
                       timeout=300, env=env, cwd=tmp)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    word, path = r.stdout.decode().split()
    assert word == "world" and path.startswith(venv)
