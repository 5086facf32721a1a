"""The goldens virtualenv the tools/gen_*.py scripts share.

A generator calls ``ensure(modules, pip_args, ...)`` before importing its reference libraries.
When every module in ``modules`` imports, nothing happens. Otherwise ``.venv-goldens`` at the
repository root (or ``$KVB_GOLDENS_VENV``) is created if missing by ``tools/goldens_venv.sh``
(every reference package, pinned in tools/goldens-requirements.txt), each ``pip install``
argument list is run in it (a no-op when the pins already cover it), and the calling script re-executes itself with the virtualenv's Python (same
arguments). Inside the virtualenv a still-missing module is a fatal error, not a loop.
"""
import importlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.abspath(os.environ.get("KVB_GOLDENS_VENV", os.path.join(ROOT, ".venv-goldens")))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
# The tiny fixture models (paths under FIXTURES) a generator runs when it checks a policy on both
# attention layouts: Llama-3 (no q/k norm) and Qwen3 (q/k RMSNorm).
TINY_MODELS = ["models/tiny-llama3", "models/tiny-qwen3"]


def fixture(rel):
    """The absolute path of ``rel``, a path under tests/fixtures."""
    return os.path.join(FIXTURES, rel)


def policy_goldens(name):
    """Where the generator of policy ``name`` writes its goldens: tests/fixtures/policies/<name>_goldens.json."""
    return os.path.join(FIXTURES, "policies", f"{name}_goldens.json")


def test_data(rel=""):
    """The repository's test data (tests/data) as configuring the build unpacks it (plain files
    copied, archives extracted): ``$KVB_TEST_DATA_DIR``, else ``build/test-data``; ``rel`` joined
    on. Exits naming the folder and how to make it when it is absent."""
    d = os.path.abspath(os.environ.get("KVB_TEST_DATA_DIR", os.path.join(ROOT, "build", "test-data")))
    if not os.path.isdir(d):
        sys.exit(f"{d}: not found; configure the build first (cmake -S . -B build), which unpacks tests/data there")
    return os.path.join(d, rel) if rel else d


def ensure(modules, *pip_installs):
    """Makes ``modules`` importable, re-running the script inside .venv-goldens if needed."""
    try:
        for m in modules:
            importlib.import_module(m)
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        sys.exit(f"{', '.join(modules)} still missing inside .venv-goldens")
    if not os.path.exists(py):
        subprocess.check_call(["bash", os.path.join(ROOT, "tools", "goldens_venv.sh")],
                              env={**os.environ, "KVB_GOLDENS_VENV": VENV})
    for args in pip_installs:
        subprocess.check_call([py, "-m", "pip", "install", *args])
    os.execv(py, [py] + sys.argv)


def write_json(path, **fields):
    """Writes ``fields`` (in order: generator, reference versions, then the goldens) to ``path`` as
    compact JSON, creating its folder, and prints the path and size."""
    import json

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(fields, f, separators=(",", ":"))
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")


def kvpress_without_init(src=None, install="pip install --no-deps kvpress==0.5.5"):
    """Makes the ``kvpress.*`` submodules importable without running kvpress/__init__.py (which
    pulls optional packages): registers an empty ``kvpress`` package whose path is ``src``/kvpress
    (a kvpress checkout) or, without ``src``, the installed kvpress's. Exits printing ``install``
    (how to install it) when kvpress is not installed."""
    import importlib.util
    import types

    if src:
        path = [os.path.join(os.path.abspath(src), "kvpress")]
    else:
        spec = importlib.util.find_spec("kvpress")
        if spec is None:
            sys.exit(f"kvpress is not installed: {install}")
        path = list(spec.submodule_search_locations)
    pkg = types.ModuleType("kvpress")
    pkg.__path__ = path
    sys.modules["kvpress"] = pkg
