"""Online selection methods: which prompts a run generates and trains on, decided inside training
from the rewards it already computes (docs/online_selection.md). One module per method, each a
:class:`Method` registered by name, like selection policies and rewards:

- ``band`` (Bae et al. 2025), ``posterior`` (MoPPS; ``warm_start``: from the probe),
  ``skip_zero_variance`` (GRESO), ``dynamic_sampling`` (DAPO), ``learnability`` (LILO) and
  ``pilot_commit`` (Pilot-Commit): each module's docstring says its paper's rule and what is ours.

A method declares

- ``Settings``: a pydantic model of its keys under ``train.online`` (``method`` plus its own),
  validated by the params schema; a key it does not declare is refused, named with its file;
- ``when``: ``"before"`` (it chooses a step's prompts before generation, :meth:`Method.choose`,
  so a run needs one training process) or ``"after"`` (it filters generated groups,
  :meth:`Method.keep`, and the update is refilled by dynamic sampling's rounds);
- its cost in the ledger (:mod:`diffgrpo.train.ledger`): ``charges_probe(settings)`` (the
  probe's samples are evidence: the probe is charged in full) and ``cost`` in words; rollouts a
  method spends besides the step's groups (a pilot) are groups of ``round`` 0 in
  ``groups.parquet``, so the ledger counts them from what the run recorded.

Your own method goes in a plugin file the params key ``plugins:`` names (docs/extending.md)::

    from diffgrpo import online

    class Settings(online.Settings):
        low: online.Frac = 0.1

    @online.register("not_too_easy")
    class NotTooEasy(online.Method):
        Settings = Settings
        when = "after"
        refills = True

        def keep(self, group):
            return group["learnable"] and group["reward_mean"] >= self.settings.low

What a method returns inside training is checked as a reward's values are (:func:`chosen`,
:func:`kept`, :func:`piloted`): ``choose`` gives as many ids of the run's prompts as the step has
groups (fewer only with ``refills``), ``keep`` a bool, and an error in the method is one
:class:`OnlineMethodError` naming the method, its file and the step, before any update.

``method: none`` is no method (training as in paper 003). Every draw is seeded by (run seed,
step, method) and reads only the run's recorded groups, so a resumed run chooses what an
uninterrupted one did. Pure functions of the history: no model, no TRL (tests/test_online.py).
"""

from __future__ import annotations

from diffgrpo.online.base import (
    METHODS, NONE, FlatSettings, Frac, Method, OnlineMethodError, PosInt, Settings, build, chosen, get, kept, names,
    piloted, register, settings_class)

__all__ = ["METHODS", "NONE", "FlatSettings", "Frac", "Method", "OnlineMethodError", "PosInt", "Settings", "build",
           "chosen", "get", "kept", "names", "piloted", "register", "settings_class"]
