"""The online-method registry, the settings every method's keys start from and the method's
interface (:mod:`diffgrpo.online` says what a method declares)."""

from __future__ import annotations

import zlib
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from diffgrpo.registry import Registry

PosInt = Annotated[int, Field(ge=1)]
Frac = Annotated[float, Field(ge=0.0, le=1.0)]

#: ``train.online.method`` of a run with no online method
NONE = "none"


class OnlineMethodError(ValueError):
    pass


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
