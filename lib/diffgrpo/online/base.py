"""The online-method registry, the settings every method's keys start from and the method's
interface (:mod:`diffgrpo.online` says what a method declares)."""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from diffgrpo.registry import Registry, shown, source_file

PosInt = Annotated[int, Field(ge=1)]
Frac = Annotated[float, Field(ge=0.0, le=1.0)]

#: ``train.online.method`` of a run with no online method
NONE = "none"


class OnlineMethodError(ValueError):
    """An unknown method, or what a method returned (or raised) inside training: named with the
    method, its file and the step, before any update (:func:`chosen`, :func:`kept`, :func:`piloted`)."""


class Settings(BaseModel):
    """``train.online``: ``method`` and that method's keys. Validating a mapping as this class
    validates it as the method's own ``Settings`` (unknown keys refused), so ``train.online`` of
    a config is an instance of the method's model and dumps its keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    method: str

    @model_validator(mode="wrap")
    @classmethod
    def _as_the_method_s(cls, data: Any, handler):
        if cls is Settings and isinstance(data, dict):
            try:
                model = settings_class(data.get("method", NONE))
            except OnlineMethodError as err:
                raise ValueError(f"`train.online.method` = {data.get('method')!r}: {err}") from None
            return model.model_validate(data)
        return handler(data)

    def problems(self, train: Any) -> list[tuple[str, str]]:
        """(key, why) for each setting that cannot work with the run's ``train`` settings (the
        params check names them ``train.online.<key>``); none by default."""
        return []

    @classmethod
    def merge_layer(cls, base: dict, layer: dict) -> tuple[dict, set[str]]:
        """Merging a params layer's ``train.online`` onto ``base`` (the layers below): the base
        without the keys the layer's method does not take when the layer switches method, and the
        keys the layer may set (its method's). A method not registered yet (a plugin's, imported
        when the params are validated) takes none of the base's keys and is checked then."""
        method = layer.get("method", base.get("method", NONE))
        try:
            known = set(settings_class(method).model_fields)
        except OnlineMethodError:
            return {"method": method}, set(layer)
        if method != base.get("method", NONE):
            base = {k: v for k, v in base.items() if k in known}
        return base, known


class FlatSettings(Settings):
    """The flat block ``train.online`` held before the registry (issue 31): the keys of the
    first three methods, with defaults.yaml's values. ``none``, ``band``, ``posterior`` and
    ``skip_zero_variance`` keep it whole, so their params files load and their run keys (the
    dump of this block) stay what they were."""

    band: list[Frac] = [0.25, 0.75]
    target: Frac = 0.5
    prior: list[Annotated[float, Field(gt=0.0)]] = [1.0, 1.0]
    decay: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    warm_start: bool = False
    window: PosInt = 1
    recheck: Frac = 0.25

    def problems(self, train: Any) -> list[tuple[str, str]]:
        out = []
        if len(self.band) != 2 or self.band[0] > self.band[1]:
            out.append(("band", f"= {self.band}: a band [low, high] of mean rewards with low <= high"))
        if len(self.prior) != 2:
            out.append(("prior", f"= {self.prior}: a Beta prior [alpha, beta], both > 0"))
        return out


class Method:
    """One online method over a run's prompts ``ids`` (its selection, in order); ``warm``: each
    prompt's (successes, samples) in the probe. The defaults choose the sampler's prompts and
    keep a group when its rewards differ (dynamic sampling's rule)."""

    name: ClassVar[str] = ""
    Settings: ClassVar[type[Settings]] = FlatSettings
    #: "before": chooses a step's prompts before generation; "after": filters generated groups
    when: ClassVar[str] = "after"
    #: the groups it drops are refilled by dynamic sampling's rounds (dynamic_sampling.max_rounds)
    refills: ClassVar[bool] = False
    #: what it costs in the ledger besides the step's groups, in words
    cost: ClassVar[str] = "its training groups only"

    def __init__(self, settings: Settings, seed: int, ids: list, warm: dict | None = None):
        self.settings, self.seed, self.ids, self.warm = settings, int(seed), list(ids), warm

    @property
    def chooses(self) -> bool:
        return self.when == "before"

    @classmethod
    def charges_probe(cls, settings: Settings) -> bool:
        """Whether its choice reads the probe (then the ledger charges the probe in full)."""
        return False

    def keep(self, group: dict) -> bool:
        """Whether a generated group enters the update."""
        return bool(group["learnable"])

    def pilot(self, batch: list, history: list[dict], step: int) -> tuple[list, int] | None:
        """Prompts to generate a pilot of before choosing, and the pilot's completions each
        (recorded as groups of round 0, not trained on, charged); None: no pilot."""
        return None

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        """The prompts step ``step`` generates instead of the sampler's ``batch`` (ids), and how
        many of ``batch`` it skipped; ``history``: the run's groups so far (this step's pilot
        groups included)."""
        return list(batch), 0

    def rng(self, step: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, step, zlib.crc32(self.name.encode())])


METHODS: Registry[type[Method]] = Registry("online method", OnlineMethodError, {
    name: f"diffgrpo.online.{name}" for name in (
        "band", "posterior", "skip_zero_variance", "dynamic_sampling", "learnability", "pilot_commit")})


def register(name: str):
    """Decorator: register a :class:`Method` subclass as online method ``name``."""

    def deco(cls: type[Method]) -> type[Method]:
        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise TypeError(f"online method {name!r}: register a subclass of diffgrpo.online.Method")
        if cls.when not in ("before", "after"):
            raise TypeError(f"online method {name!r}: when = {cls.when!r}; 'before' (chooses) or 'after' (filters)")
        cls.name = name
        METHODS.add(name, cls)
        return cls

    return deco


def get(name: str) -> type[Method]:
    return METHODS.get(name)


def names() -> list[str]:
    return METHODS.names()


def settings_class(method: str) -> type[Settings]:
    """The settings model of ``method`` (``none``: the flat block)."""
    return FlatSettings if method == NONE else get(method).Settings


def build(settings: Settings, seed: int, ids: list, warm: dict | None = None) -> Method | None:
    """The method ``settings`` names over a run's prompts (None for ``none``)."""
    return None if settings.method == NONE else get(settings.method)(settings, seed, ids, warm)


# ---- what a method returns inside training, checked as rewards are (rewards.checked) ----------
# A plugin's choose that returned 1 of 4 prompts trained one group a step and the run was recorded
# complete; an id not in the run trained nothing (a raw KeyError); a keep that returned NaN kept
# every group, flat ones included. The trainer calls a method through these three.


def chosen(method: Method, batch: list, history: list[dict], step: int) -> tuple[list, int]:
    """``method.choose(batch, history, step)`` when it returns (ids, skipped): as many ids of the
    run's prompts as ``batch`` holds (the groups the step trains; fewer, one at least, for a method
    that declares ``refills``: dynamic sampling's rounds fill the rest), and ``skipped`` a count
    of ``batch``'s prompts from 0 to all; else :class:`OnlineMethodError`."""
    out = _call(method, "choose", step, lambda: method.choose(batch, history, step))
    rule = (f"`choose` returns (ids, skipped): {len(batch)} ids of the run's prompts, one per group the step trains"
            + (" (fewer, one at least: dynamic sampling's rounds refill the step)" if method.refills else
               " (fewer only for a method that declares `refills = True`, whose groups dynamic sampling refills)")
            + f", and how many of the sampler's {len(batch)} it skipped")
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise _wrong(method, "choose", step, out, rule)
    ids, skipped = out
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__len__"):
        raise _wrong(method, "choose", step, out, rule)
    ids = list(ids)
    n, least = len(ids), (1 if method.refills else len(batch))
    if not least <= n <= len(batch):
        raise _wrong(method, "choose", step, out, f"{n} ids for a step of {len(batch)} groups; {rule}")
    _known(method, "choose", step, ids, out)
    if isinstance(skipped, (bool, np.bool_)) or not isinstance(skipped, (int, np.integer)) \
            or not 0 <= skipped <= len(batch):
        raise _wrong(method, "choose", step, out, f"skipped = {shown(skipped)}; {rule}")
    return ids, int(skipped)


def kept(method: Method, group: dict, step: int) -> bool:
    """``method.keep(group)`` when it is a bool (numpy's too); else :class:`OnlineMethodError`."""
    out = _call(method, "keep", step, lambda: method.keep(group))
    if not isinstance(out, (bool, np.bool_)):
        raise _wrong(method, "keep", step, out, "`keep` returns True or False (a bool: not NaN, a number or None) "
                     f"for each generated group (here prompt id {group.get('prompt_id')!r})")
    return bool(out)


def piloted(method: Method, batch: list, history: list[dict], step: int) -> tuple[list, int] | None:
    """``method.pilot(batch, history, step)`` when it is None or (ids of the run's prompts, one at
    least, and the completions of each, one at least); else :class:`OnlineMethodError`."""
    out = _call(method, "pilot", step, lambda: method.pilot(batch, history, step))
    if out is None:
        return None
    rule = "`pilot` returns None or (ids of the run's prompts, completions per prompt: a whole number >= 1)"
    if not (isinstance(out, (tuple, list)) and len(out) == 2) or isinstance(out[0], (str, bytes, dict)) \
            or not hasattr(out[0], "__len__") or not len(out[0]):
        raise _wrong(method, "pilot", step, out, rule)
    ids, m = list(out[0]), out[1]
    _known(method, "pilot", step, ids, out)
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m < 1:
        raise _wrong(method, "pilot", step, out, rule)
    return ids, int(m)


def _call(method: Method, what: str, step: int, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as err:  # the method's own error: named with where it is, its traceback kept below
        raise OnlineMethodError(f"{_where(method, err)} raised {type(err).__name__}: {err} in `{what}` at step "
                                f"{step}; fix the method, nothing of this step was trained") from err


def _known(method: Method, what: str, step: int, ids: list, out: Any) -> None:
    run = set(method.ids)
    try:
        foreign = [pid for pid in ids if pid not in run]
    except TypeError:  # an unhashable id
        foreign = [next(pid for pid in ids if not isinstance(pid, (str, int, np.integer, np.str_)))]
    if foreign:
        raise _wrong(method, what, step, out, f"{len(foreign)} of its ids are not prompts of the run (e.g. "
                     f"{shown(foreign[0])}); `{what}` returns ids of the run's prompts (the method's `ids`)")


def _wrong(method: Method, what: str, step: int, out: Any, rule: str) -> OnlineMethodError:
    return OnlineMethodError(f"{_where(method)} returned {shown(out)} from `{what}` at step {step}: {rule}; fix the "
                             "method, nothing of this step was trained")


def _where(method: Method, err: BaseException | None = None) -> str:
    """``online method 'name' (its file[, the line that raised])``."""
    file = source_file(type(method))
    line = ""
    if err is not None:  # the innermost frame of the method's file: where it raised
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == file]
        line = f", line {frames[-1].lineno}" if frames else ""
    return f"online method {method.name or type(method).__name__!r} ({file}{line})"
