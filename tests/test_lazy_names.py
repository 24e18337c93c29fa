"""The packages whose public names load on first use (PEP 562, ``diffgrpo.lazy_names``:
``diffgrpo.params``, ``diffgrpo.train``) list those names in ``dir()`` (what a notebook's
completion offers), without importing the modules that define them (issue 45)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import diffgrpo

# in a fresh interpreter: dir() of the package, and which of its submodules that imported
CODE = """
import importlib, json, sys
package = importlib.import_module(sys.argv[1])
listed = dir(package)
loaded = sorted(m for m in sys.modules if m.startswith(sys.argv[1] + ".") or m.split(".")[0] in ("trl", "peft", "pydantic"))
print(json.dumps({"listed": listed, "public": package.__all__, "loaded": loaded}))
"""


@pytest.mark.parametrize("package", ["diffgrpo.params", "diffgrpo.train"])
def test_dir_lists_the_lazy_names_and_imports_nothing(package):
    done = subprocess.run([sys.executable, "-c", CODE, package], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["public"] and set(got["public"]) <= set(got["listed"])
    assert "__name__" in got["listed"] and got["listed"] == sorted(got["listed"])  # the module's own names too
    assert got["loaded"] == []  # listing a name imports neither its module nor TRL, PEFT or pydantic


def test_each_listed_name_resolves_and_an_unknown_one_is_named():
    from diffgrpo import params, train

    assert params.Config is params.schema.Config and "Config" in dir(params)
    assert train.run_levels is train.levels.run_levels and "run_levels" in dir(train)
    with pytest.raises(AttributeError, match="module 'diffgrpo.train' has no attribute 'no_such_name'"):
        train.no_such_name
    getattr_, dir_ = diffgrpo.lazy_names("diffgrpo.params", {"extra": "schema"})
    assert "extra" in dir_() and "Config" not in dir_()  # the names it was given, beside the module's own
