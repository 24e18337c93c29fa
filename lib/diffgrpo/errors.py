"""What a command prints when it stops on a known error: one line ``error: ...`` that names the
culprit and says what to do, and a nonzero exit, never a traceback.

Every entry point runs its ``main`` through :func:`run`: ``python -m diffgrpo.study`` (and its
``--plan``), ``python -m diffgrpo.train`` and ``python -m diffgrpo.analysis.inputs`` (``make
results``). :data:`NAMED` is the one list of the project's error classes whose message says what
to do (two wrappers kept lists of their own, and they drifted: the study's lacked ``RewardError``
and ``LedgerError``, the train command's ``TaskError`` and ``TrackerError``); a full disk or a
read-only folder is :func:`diffgrpo.store.artifacts.storage_problem`'s line. Any other error is a
bug, shown with its traceback.

``tests/test_locks_and_checks.py`` checks that every error class defined in ``lib/diffgrpo`` is
here (or derives from one that is, or is one a module turns into one of these).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: each module's error classes whose message names the culprit and says what to do. Looked up in
#: ``sys.modules`` when an error is caught, so this module imports none of them: an error of a
#: module never imported cannot have been raised
NAMED: dict[str, tuple[str, ...]] = {
    "diffgrpo.params.files": ("ParamsError",),  # the plan's PlanError and PlanDoesNotFit derive from it
    "diffgrpo.tasks.base": ("TaskError",),
    "diffgrpo.tasks.offline": ("OfflineError",),
    "diffgrpo.policies": ("SelectionError",),
    "diffgrpo.rewards": ("RewardError",),
    "diffgrpo.online.base": ("OnlineMethodError",),
    "diffgrpo.models.resolve": ("ModelPathError",),
    "diffgrpo.models.generation": ("PromptTooLong",),
    "diffgrpo.models.resumable_sampling": ("HelpersFailed",),
    "diffgrpo.train.config": ("ScheduleChanged",),
    "diffgrpo.train.ledger": ("LedgerError",),
    "diffgrpo.train.derived": ("NotDerivable",),  # caught by train_run (the budget trains alone); named if it escapes
    "diffgrpo.store.artifacts": ("OutputsError", "FolderBusy", "ArtifactError"),
    "diffgrpo.store.layout": ("NotRunYet",),
    "diffgrpo.store.trackers": ("TrackerError",),
    "diffgrpo.study.notebooks": ("NotebookParameterError", "StageFailed"),
    "diffgrpo.study.slurm": ("SlurmError",),
    "diffgrpo.study.reproduce": ("NotCommitted",),
}
#: the exit status of a stage that failed (its executed notebook holds the traceback), and of
#: every other named error (a refusal before or during work)
FAILED, REFUSED = 1, 2
#: the exit status of a command stopped by Ctrl-C
STOPPED = 130


def named_classes() -> tuple[type, ...]:
    """The classes of :data:`NAMED` whose modules are imported (a name a module lost is skipped
    here, never an error of its own on the way out; the test of this module finds it)."""
    found = (getattr(sys.modules[module], name, None) for module, names in NAMED.items() if module in sys.modules
             for name in names)
    return tuple(c for c in found if isinstance(c, type))


def line(err: BaseException, also: tuple[type, ...] = ()) -> str | None:
    """The one line a command prints for ``err`` (without ``error: ``): its message when its class
    is named (:data:`NAMED`, or ``also``: a command's own), the storage line for a full disk or an
    unwritable folder; None for any other error (a bug: its traceback is shown)."""
    if isinstance(err, named_classes() + tuple(also)):
        return str(err)
    if isinstance(err, (OSError, RuntimeError)):
        from diffgrpo.store.artifacts import storage_problem

        return storage_problem(err)
    return None


def run(command: Callable[[], int], *, stopped: str, also: tuple[type, ...] = (), storage_note: str = "") -> int:
    """``command()``'s exit status; a named error (:func:`line`) printed as one line ``error: ...``
    and exit :data:`REFUSED` (:data:`FAILED` for a failed stage); Ctrl-C: ``stopped`` (what a
    rerun does), exit :data:`STOPPED`. ``also``: error classes this command's own code raises with
    a message that says what to do; ``storage_note``: what a full disk left as it was."""
    try:
        return command()
    except KeyboardInterrupt:
        print(f"\n{stopped}", file=sys.stderr)
        return STOPPED
    except Exception as err:
        said = line(err, also)
        if said is None:
            raise
        if not isinstance(err, named_classes() + tuple(also)) and storage_note:
            said = f"{said}; {storage_note}"
        print(f"error: {said}", file=sys.stderr)
        failed = sys.modules.get("diffgrpo.study.notebooks")
        return FAILED if failed is not None and isinstance(err, failed.StageFailed) else REFUSED
