"""Reading params files: YAML layers (a key given twice in one mapping refused, 3e-5 read as a
float), ``include:``, dotted overrides, which file set each key (so an error names it), and the
plugins a params file names (Python files or modules imported before validation). The schema
the layers are checked against is :mod:`diffgrpo.params`'."""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from diffgrpo.store.artifacts import checkout_root


class ParamsError(ValueError):
    """A parameter file or override that does not fit the schema."""


PARAMS_DIR_NAME = "params"
DEFAULTS_FILE = "defaults.yaml"


def params_dir() -> Path:
    return checkout_root() / PARAMS_DIR_NAME


def resolve(path: str | Path) -> Path:
    """A params file by path, or by bare name inside params/ (``embedded`` -> params/embedded.yaml)."""
    p = Path(path)
    candidates = [p, params_dir() / p, params_dir() / f"{p}.yaml"]
    for c in candidates:
        if c.is_file():
            return c
    raise ParamsError(f"params file not found: {path} (looked in {', '.join(map(str, candidates))})")


def overrides_mapping(overrides: Any) -> dict[str, Any] | None:
    """``overrides`` as a mapping; papermill's ``-p overrides ...`` hands a notebook a string,
    taken when it reads as a YAML mapping (``'{train.max_steps: 3}'``)."""
    if overrides is None or isinstance(overrides, dict):
        return overrides
    if isinstance(overrides, str):
        try:
            parsed = yaml.load(overrides, Loader=_StrictLoader)
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        if not overrides.strip():
            return None
    raise ParamsError(
        f"overrides = {overrides!r}: expected a mapping of dotted keys to values, got {type(overrides).__name__}; "
        "with papermill pass it as YAML, e.g. -y 'overrides: {train.max_steps: 3}' or "
        "-p overrides '{train.max_steps: 3}'; in Python, overrides={\"train.max_steps\": 3}")


_PLUGINS: dict[str, str] = {}  # absolute path or module name -> the module's name in sys.modules


def load_plugin(entry: str, named_in: str) -> str:
    """Import a plugin once per process: a ``.py`` file (relative to the params file that names
    it, else to the folder the command ran in) or a module name. Returns the entry as it is
    recorded: a file's absolute path, a module's name."""
    if not isinstance(entry, str) or not entry:
        raise ParamsError(f"{named_in}: `plugins` lists {entry!r}; give a .py file or a module name")
    if entry.endswith(".py") or "/" in entry:
        here = Path(named_in).parent if named_in not in ("params", "overrides") else Path.cwd()
        path = next((p.resolve() for p in (here / entry, Path.cwd() / entry) if p.is_file()), None)
        if path is None:
            raise ParamsError(f"{named_in}: plugin file {entry!r} not found (looked in {here} and {Path.cwd()})")
        key = str(path)
        if key not in _PLUGINS:
            name = f"diffgrpo_plugin_{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as err:
                del sys.modules[name]
                raise ParamsError(f"{named_in}: plugin {path} failed to import: {type(err).__name__}: {err}") from err
            _PLUGINS[key] = name
        return key
    try:
        importlib.import_module(entry)
    except ImportError as err:
        raise ParamsError(f"{named_in}: plugin module {entry!r} does not import ({err}); name a .py file or an "
                          "installed module") from err
    return entry


#: the most aliases (``*name``) one YAML document may use, and the most values it may expand to:
#: an alias bomb (aliases of aliases, 0.5 KB) would otherwise expand to billions of values when
#: the params are merged, validated or hashed into a key
MAX_ALIASES, MAX_VALUES = 100, 100_000


class YamlTooLarge(yaml.YAMLError):
    """A YAML document whose aliases exceed :data:`MAX_ALIASES` or expand beyond :data:`MAX_VALUES`."""


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    silently), reading 3e-5 as a float (YAML 1.1 makes it a string), and bounded: aliases are
    counted while the document is composed and its expanded size measured before any value is
    built (:data:`MAX_ALIASES`, :data:`MAX_VALUES`)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases = getattr(self, "aliases", 0) + 1
            if self.aliases > MAX_ALIASES:
                raise YamlTooLarge(f"more than {MAX_ALIASES} aliases (`*name`) in one document, near "
                                   f"{_at(self.peek_event().start_mark)}; write the values out")
        return super().compose_node(parent, index)

    def compose_document(self):
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """The values ``node`` stands for with every alias expanded (a shared node counted once per
    use, measured once); beyond :data:`MAX_VALUES`, or a node inside itself, is refused."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise YamlTooLarge(f"an alias refers to a value that contains it, near {_at(node.start_mark)}")
    open_.add(id(node))
    n = 1
    if isinstance(node, yaml.SequenceNode):
        n += sum(_expanded_size(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        n += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    if n > MAX_VALUES:
        raise YamlTooLarge(f"its aliases expand it to more than {MAX_VALUES} values (an alias bomb), near "
                           f"{_at(node.start_mark)}; write the values out")
    open_.discard(id(node))
    sizes[id(node)] = n
    return n


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise yaml.constructor.ConstructorError(None, None, f"key(s) {dup} given twice in one mapping", node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def read_yaml_value(text: str) -> Any:
    """One value as the params files read it (``--set`` values, papermill's overrides)."""
    return yaml.load(text, Loader=_StrictLoader)


def parse_overrides(pairs: list[str]) -> dict:
    """``--set key=value`` pairs as a dict, each value read as YAML; a pair that is not
    ``key=value`` or whose value is not YAML is a :class:`ParamsError` naming it."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ParamsError(f"--set {pair!r}: expected key=value, e.g. --set train.max_steps=20")
        key, value = pair.split("=", 1)
        try:
            out[key] = read_yaml_value(value)
        except yaml.YAMLError as err:
            why = " ".join(str(err).split())
            raise ParamsError(f"--set {pair!r}: the value {value!r} is not valid YAML ({why}); write a list "
                                     f"as [4, 5], quote a string as '{key}=\"...\"'") from None
    return out


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    """``text`` parsed (the pure-Python loader, 20 ms a params file), once per distinct text: a
    test session loads the same 30 files hundreds of times. Keyed by the whole text, so an edited
    file is parsed anew; callers get a copy (:func:`read_yaml`)."""
    return yaml.load(text, Loader=_StrictLoader)


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = copy.deepcopy(_parsed(path.read_text())) or {}
    except YamlTooLarge as e:
        raise ParamsError(f"{path}: refused before it is read: {e}") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def with_includes(path: Path, seen: set[Path]) -> list[Path]:
    """``path`` preceded by the files it includes (recursively), each once (a file two includes
    share, a diamond, is layered where it first comes); ``seen``: the files including this one,
    so that a file that includes itself, directly or not, is a cycle."""
    if path.resolve() in seen:
        raise ParamsError(f"{path}: include cycle (it includes itself through {', '.join(sorted(p.name for p in seen))})")
    seen = seen | {path.resolve()}
    includes = read_yaml(path).get("include", [])
    includes = [includes] if isinstance(includes, str) else includes
    if not isinstance(includes, list) or not all(isinstance(i, str) and i for i in includes):
        raise ParamsError(f"{path}: `include` = {includes!r}: expected a file name or a list of file names")
    out: list[Path] = []
    for inc in includes:
        here = [path.parent / inc, path.parent / f"{inc}.yaml"]
        found = next((c for c in here if c.is_file()), None)
        if found is None:
            try:
                found = resolve(inc)
            except ParamsError:
                looked = here + [params_dir() / inc, params_dir() / f"{inc}.yaml"]
                raise ParamsError(f"{path}: `include: {inc}` names no file (looked in "
                                  f"{', '.join(map(str, dict.fromkeys(looked)))}); fix the name in {path.name} or "
                                  "add the file") from None
        out.extend(with_includes(found, seen))
    return list({p.resolve(): p for p in out + [path]}.values())  # each file where it first comes


def expand(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"train.max_steps": 5}`` -> ``{"train": {"max_steps": 5}}`` (nested dicts pass through)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if not isinstance(key, str) or not key:
            raise ParamsError(f"{where}: keys must be non-empty strings, got {key!r}")
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{where}: key {key!r} conflicts with another override")
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(value)
        else:
            node[parts[-1]] = value
    return out


#: free-form mappings whose keys layer one by one (a study file adds to gpu.yaml's TRL options);
#: any other free-form mapping is replaced whole by the layer that sets it
LAYERED_MAPPINGS = ("train.trl", "cluster.stages", "cluster.sbatch")
#: a task's options layer key by key over the included file's while the task stays the one it
#: names (``task_options: {test_size: 1000}`` changes that option alone: the others are not the
#: generator's defaults then); a layer that names another task, or sets ``task_options: {}``,
#: starts them afresh
TASK_OPTIONS = ("dataset.", "task", "task_options")


def merge(base: dict, layer: dict, origin: dict[str, str], where: str, schema: type[BaseModel],
          prefix: str = "") -> dict:
    """Deep-merge ``layer`` onto ``base`` after checking its keys against ``schema`` (the
    model of the mapping at ``prefix``), so an unknown key is named with the file that brought it."""
    cls = section_at(schema, prefix)
    if cls is not None:
        if not isinstance(layer, dict):
            raise ParamsError(f"{where}: `{prefix.rstrip('.')}` must be a mapping, got {layer!r}")
        known = set(cls.model_fields) | ({"include"} if not prefix else set())
        if hasattr(cls, "merge_layer"):  # keys that depend on a value (train.online: its method's, diffgrpo.online)
            base, known = cls.merge_layer(base, layer)
        for key in layer:
            if key not in known:
                raise ParamsError(unknown_key(where, prefix, str(key), known))
    out = dict(base)
    if not prefix and "arms" in layer and "primary" not in (layer.get("analyze") or {}) \
            and (out.get("analyze") or {}).get("primary"):
        # the declared question names arms: a layer that sets new arms declares its own, or none
        out["analyze"] = {**out["analyze"], "primary": [],
                          **({"confirmation": None} if "confirmation" in out["analyze"] else {})}
        origin["analyze.primary"] = where
    if not prefix and "study" in layer and "confirmation" not in (layer.get("analyze") or {}) \
            and (out.get("analyze") or {}).get("confirmation"):
        # the study that confirms a question is the declaring study's: a layer that names a new study has its own
        out["analyze"] = {**out["analyze"], "confirmation": None}
        origin["analyze.confirmation"] = where
    section, task, options = TASK_OPTIONS
    same_task = prefix != section or layer.get(task, base.get(task)) == base.get(task)
    if not same_task and options not in layer and options in out:  # another task: none of the old one's options
        out[options] = {}
        origin[prefix + options] = where
    for key, value in layer.items():
        if key == "include" and not prefix:
            continue
        dotted = f"{prefix}{key}"
        layered = section_at(schema, dotted + ".") is not None or dotted in LAYERED_MAPPINGS \
            or (dotted == section + options and same_task and value != {})
        if layered and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, origin, where, schema, dotted + ".")
        else:
            out[key] = value
            origin[dotted] = where
    return out


def unknown_key(where: str, prefix: str, key: str, known) -> str:
    """One line for a key the schema does not know: the file, the dotted key, a did-you-mean."""
    hint = closest(key, known)
    return (f"{where}: unknown key `{prefix}{key}`" + (f" (did you mean `{prefix}{hint}`?)" if hint else "")
            + f"; known keys here: {sorted(known)}")


def section_at(schema: type[BaseModel], prefix: str) -> type[BaseModel] | None:
    """The model of the mapping at dotted ``prefix`` of ``schema``; None: a free-form mapping."""
    cls: Any = schema
    for part in [p for p in prefix.split(".") if p]:
        if part not in cls.model_fields:
            return None
        ann = cls.model_fields[part].annotation
        cls = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if cls is None:
            return None
    return cls


def closest(key: str, known) -> str | None:
    match = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return match[0] if match else None
