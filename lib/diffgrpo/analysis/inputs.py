"""A committed report and the inputs it is re-rendered from.

    python -m diffgrpo.analysis.inputs export outputs/embedded docs/results/embedded/inputs
    python -m diffgrpo.analysis.inputs render docs/results/embedded/inputs docs/results/embedded
    make results STUDY=embedded      # both, from outputs/<study>: a rerun's report committed in one command

``docs/results/<study>/inputs/`` is a study folder (the layout of :mod:`diffgrpo.store.layout`)
that holds only what :func:`diffgrpo.analysis.report.report` reads, copied byte for byte (bar the
completions' text of an evaluation's samples, below; each
with the ``manifest.json`` whose digests the reader checks), so the report code reads it as it
reads ``outputs/<study>/``:

- ``report/params.yaml``: the params the report was computed with (the report writes it). The
  re-render takes its config from here, not from today's ``params/*.yaml``;
- ``probe/<model>/<key>/``: the pool probe's ``prompts.parquet`` (the learnability prior) and
  ``samples.parquet`` (the probe-budget section); with ``probe.test``, the test probe's
  ``prompts.parquet`` (gains by test difficulty);
- ``select/``: each planned arm's selection (per seed for a per-seed policy);
- ``runs/<run_id>/``: each planned run's ``manifest.json`` (an incomplete run's alone: the report
  names it skipped), a complete run's ``groups.parquet`` and ``steps.parquet``;
- ``eval/<run_id>/`` (the base model and each complete run): ``samples.parquet`` (the per-prompt
  scores every interval resamples; without the completions' text, :data:`DROPPED`, its manifest's
  digest the exported file's), ``summary.parquet``, ``tiers.parquet``; ``eval-<set>/<run_id>/``:
  ``summary.parquet``.

Left out: checkpoints, TensorBoard files, chunk folders (``work/``), executed notebooks, Slurm
records, the one-sample probe, ``timings.json`` (the machine's seconds: ``make results`` copies it
beside the report, where it is not compared).

Two things a re-render reads from outside ``inputs/``: a probe folder's name is its key, which
holds the digest of the model's files (:func:`diffgrpo.store.layout.probe_key`), so the model must
be the one that was probed (the packaged embedded model is; :func:`render` names the model when
it is not), and the ``plateau`` section takes each test prompt's tier from the task's held-out
rows (:func:`diffgrpo.tasks.splits.load_test`), which the task's code makes or reads again.

Every file of a committed report but its ``README.md`` and ``timings.json`` is what :func:`render`
writes (:data:`COMMITTED`); ``tests/test_committed_results.py`` renders each ``inputs/`` again and
compares byte for byte (:func:`differences`), figures included: matplotlib's Agg PNGs carry no
date, and the same versions draw the same bytes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from diffgrpo import errors, params, select
from diffgrpo.params import Config
from diffgrpo.store import artifacts, layout

#: the files of a rendered report that a committed one keeps (the CSVs repeat the markdown tables)
COMMITTED = ("*.md", "*.png", layout.REPORT_SUMMARY, layout.PARAMS)
#: the files of a committed report's folder that no render writes: the hand-written page, the
#: study's seconds per notebook (the machine's), and the inputs
NOT_RENDERED = ("README.md", layout.TIMINGS, "inputs")
#: the record of the files an export wrote into its folder (the export removes those, and only
#: those, when it runs again there; any other file there is a named refusal)
EXPORTED = "exported.json"
#: the same for a rendered report's folder: the report files the render wrote
RENDERED = "rendered.json"
WRITER = {EXPORTED: "python -m diffgrpo.analysis.inputs export", RENDERED: "python -m diffgrpo.analysis.inputs render"}
#: where the committed reports live, one folder per study
RESULTS = Path("docs") / "results"


def results_dir(study: str) -> Path:
    """``docs/results/<study>/`` of the checkout in use; ``study`` a plain name (:func:`check_study`)."""
    return artifacts.checkout_root() / RESULTS / check_study(study)


def check_study(study: str) -> str:
    """``study`` when it is a study's name (:data:`diffgrpo.params.SAFE_NAME`, the rule of the
    params key ``study``); a path (``/abs/outputs/tiny``, ``../x``) is refused before any work:
    ``make results`` read it as a study, then renamed and deleted it, or wrote outside docs/results."""
    if not params.SAFE_NAME.fullmatch(study):
        plain = Path(study).name
        hint = f" (STUDY={plain})" if params.SAFE_NAME.fullmatch(plain) else ""
        raise params.ParamsError(f"STUDY={study!r}: not a study's name; name the study{hint}, not a path: a letter "
                                 "or digit followed by letters, digits, `.`, `_` or `-` (no `/`, no `..`, not "
                                 "absolute); make results reads outputs/<study> and writes docs/results/<study>")
    return study


#: this process's locks of committed reports (:func:`writing`), so results' own export and render
#: enter the lock it holds
_HELD: set[Path] = set()


@contextmanager
def writing(dest: Path) -> Iterator[None]:
    """Hold the lock of the committed report ``dest`` lies in (``docs/results/<study>/``, its
    ``inputs/``, or :func:`results`' ``.<study>.building``): one writer per study at a time, so
    two ``make results`` (or an export or render beside one) never remove each other's files; a
    second is refused, naming the folder and the holder's pid (:func:`diffgrpo.store.artifacts.exclusive`).
    A destination outside docs/results is the caller's and takes no lock."""
    root = (artifacts.checkout_root() / RESULTS).resolve()
    try:
        first = Path(dest).resolve().relative_to(root).parts[0]
    except (ValueError, IndexError):  # not inside a study's folder of docs/results
        yield
        return
    swap = re.fullmatch(r"\.(.+)\.(?:building|replaced)", first)
    folder = root / (swap.group(1) if swap else first)
    if folder in _HELD:
        yield
        return
    with artifacts.exclusive(folder):
        _HELD.add(folder)
        try:
            yield
        finally:
            _HELD.discard(folder)


def config(study_dir: Path) -> Config:
    """The params the study's report was computed with (``report/params.yaml``)."""
    path = Path(study_dir) / "report" / layout.PARAMS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no record of the params this study's report was computed with (a report "
                                "written before reports recorded them); rerun its analysis (05_analyze)")
    return params.load(path, defaults=False)


def probe_folders(cfg: Config) -> dict[str, Path]:
    """The probe folders the report reads, by role ("pool"; "test" with ``probe.test``),
    relative to the study folder."""
    roles = ["pool", "test"] if cfg.probe.test else ["pool"]
    return {role: layout.probe_dir(cfg, role).relative_to(layout.study_dir(cfg)) for role in roles}


def needed(cfg: Config, study_dir: Path) -> tuple[list[Path], list[Path]]:
    """(required, optional) files the report of ``cfg`` reads from ``study_dir``, relative to
    it. Optional: what the report does without (no probe of the pool: the Jeffreys prior and no
    probe-budget section; a planned run never trained: named skipped)."""
    study_dir = Path(study_dir)
    probes = probe_folders(cfg)
    required = [Path("report") / layout.PARAMS, Path("select") / layout.MANIFEST]
    optional = [probes["pool"] / f for f in (layout.PROMPTS, layout.SAMPLES, layout.MANIFEST)]
    if "test" in probes:
        required += [probes["test"] / f for f in (layout.PROMPTS, layout.MANIFEST)]
    base = layout.study_dir(cfg)
    for arm in dict.fromkeys(a for a, _ in layout.planned_runs(cfg)):
        seeds = cfg.train.seeds if select.per_seed(cfg.arm(arm).select) else [None]
        required += [layout.selection_file(cfg, arm, seed).relative_to(base) for seed in seeds]
    complete = [layout.BASE_RUN]
    for arm, seed in layout.planned_runs(cfg):
        run = Path("runs") / layout.run_id(arm, seed)
        optional.append(run / layout.MANIFEST)
        manifest = artifacts.read_manifest(study_dir / run / layout.MANIFEST, "03_train") or {}
        if manifest.get("status") == "complete":
            required += [run / layout.GROUPS, run / layout.STEPS]
            complete.append(run.name)
    for eval_set in cfg.eval_set_names():
        folder = layout.evals_dir(Path(), eval_set)
        names = ((layout.SAMPLES, layout.EVAL_SUMMARY, layout.EVAL_TIERS) if eval_set == params.TEST_SET
                 else (layout.EVAL_SUMMARY,))
        required += [folder / rid / f for rid in complete for f in (*names, layout.MANIFEST)]
    return required, optional


#: columns of an evaluation's ``samples.parquet`` that no report reads, left out of an export: the
#: completions' text (the intervals resample the scores beside it). It is 87% of the file at 1,000
#: prompts x (greedy + 4 samples); the exported manifest's digest is the exported file's, and it
#: records what was left out (``exported_without``)
DROPPED = ("completion",)


def _slim(rel: Path) -> bool:
    """An evaluation's samples (``eval/<run>/samples.parquet``), exported without :data:`DROPPED`."""
    rel = Path(rel)
    return rel.name == layout.SAMPLES and rel.parts[0].startswith("eval")


def export(study_dir: Path, dest: Path) -> dict[str, int]:
    """Copy what the report of ``study_dir`` reads (:func:`needed`) into ``dest``, in the study
    folder's layout, replacing an earlier export there; return each file's size in bytes.

    ``dest`` records what it wrote (:data:`EXPORTED`); a later export removes those files and no
    other: a ``dest`` holding a file no export recorded (a study folder, arguments swapped) is
    refused, naming the file, before anything is changed. One writer per committed report at a
    time (:func:`writing`)."""
    study_dir, dest = Path(study_dir), Path(dest)
    with writing(dest):
        return _export(study_dir, dest)


def _export(study_dir: Path, dest: Path) -> dict[str, int]:
    cfg = config(study_dir)
    if cfg.analyze.compare:
        raise ValueError(f"{study_dir}: analyze.compare = {list(cfg.analyze.compare)}: a grid's report reads other "
                         "studies' reports, which a study's inputs do not hold")
    required, optional = needed(cfg, study_dir)
    missing = [p for p in required if not (study_dir / p).is_file()]
    if missing:
        raise FileNotFoundError(f"{study_dir / missing[0]}: the report reads it and it is not there; run the "
                                f"{artifacts.stage_of(missing[0]) or 'stage that writes it'} stage")
    _check_apart(study_dir, dest)
    written = required + [p for p in optional if (study_dir / p).is_file()]
    _clear(dest, EXPORTED, _all_files(dest), [str(p) for p in written])
    sizes, slimmed = {}, []
    for rel in written:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if _slim(rel):
            df = artifacts.read_parquet(study_dir / rel, "04_evaluate")
            artifacts.write_parquet(dest / rel, df.drop(columns=[c for c in DROPPED if c in df]))
            slimmed.append(Path(rel))
        else:
            shutil.copyfile(study_dir / rel, dest / rel)
    for rel in slimmed:  # the evaluation's manifest vouches for the file the export wrote
        manifest = dest / rel.parent / layout.MANIFEST
        record = artifacts.read_json(manifest, "04_evaluate")
        record["sha256"] = {**record.get("sha256", {}), **artifacts.digests(dest / rel.parent, [rel.name])}
        record["exported_without"] = {rel.name: [c for c in DROPPED]}
        artifacts.write_json(manifest, record)
    for rel in written:
        sizes[str(rel)] = (dest / rel).stat().st_size
    _record(dest, EXPORTED, sizes)
    return dict(sorted(sizes.items()))


def _check_apart(study_dir: Path, dest: Path) -> None:
    """An export never lands in (or around) the folder it reads: ``export outputs/x outputs/x``."""
    src, dst = study_dir.resolve(), dest.resolve()
    if src == dst or src in dst.parents or dst in src.parents:
        raise FileExistsError(f"{dest}: the export's destination is {study_dir} itself or holds it/lies inside it; "
                              "name a folder of its own (docs/results/<study>/inputs: `python -m "
                              "diffgrpo.analysis.inputs export outputs/<study> docs/results/<study>/inputs`)")


def _all_files(folder: Path) -> list[str]:
    """Every file under ``folder`` (relative, sorted); none when it does not exist."""
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder}: a file, not a folder; name a folder")
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink()) \
        if folder.exists() else []


def written_before(folder: Path, marker: str) -> set[str]:
    """The files an earlier export or render recorded writing in ``folder`` (its ``marker``)."""
    path = Path(folder) / marker
    if not path.is_file():
        return set()
    try:
        return set(json.loads(path.read_text())["files"])
    except (ValueError, KeyError, TypeError) as err:
        raise artifacts.ArtifactError(f"{path}: damaged ({err}); it records what an export or render wrote here, "
                                      "so nothing here is removed: move the folder aside and run again") from None


def _clear(folder: Path, marker: str, present: list[str], new: list[str]) -> None:
    """Remove from ``folder`` the files its ``marker`` records an earlier run writing; any other of
    ``present`` (the files this command would remove or overwrite) is a named refusal."""
    ours = _clear_check(folder, marker, present)
    _record(folder, marker, sorted(ours | set(new)))  # an interruption leaves every file here recorded
    for name in sorted(ours - set(new)):
        (folder / name).unlink(missing_ok=True)
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            d.rmdir()


def _clear_check(folder: Path, marker: str, present: list[str]) -> set[str]:
    """The files ``folder``'s ``marker`` records; a named refusal when ``present`` holds another."""
    ours = written_before(folder, marker)
    foreign = [f for f in present if f not in ours and f != marker]
    if foreign:
        raise FileExistsError(f"{folder / foreign[0]}: not written by an earlier `{WRITER[marker]}` here (not in "
                              f"{folder / marker}; {len(foreign)} such files), and this command would remove or "
                              "overwrite it; nothing was changed: name an empty or new folder, or move those files away")
    return ours


def _record(folder: Path, marker: str, files) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(folder / marker, {"written_by": WRITER[marker], "files": sorted(files)})


def render(inputs: Path, out: Path) -> list[str]:
    """The report of the study folder ``inputs`` (an export), by today's analysis code, its
    :data:`COMMITTED` files written into ``out``; return their names. ``out`` records them
    (:data:`RENDERED`): a report file an earlier render recorded and this one does not write is
    removed; a report file there that no render recorded (``render <inputs> docs``) is refused,
    naming it, before anything is written; other files are left alone. One writer per committed
    report at a time (:func:`writing`)."""
    inputs, out = Path(inputs), Path(out)
    with writing(out):
        return _render(inputs, out)


def _render(inputs: Path, out: Path) -> list[str]:
    from diffgrpo.analysis import report

    cfg = config(inputs)
    if out.is_dir():
        _clear_check(out, RENDERED, sorted(report_files(out)))  # refused before the minutes of a render
    with tempfile.TemporaryDirectory(prefix="diffgrpo-render-") as tmp, artifacts.outputs_at(tmp):
        copy = shutil.copytree(inputs, Path(tmp) / cfg.study)
        _check_probes(cfg, inputs)
        try:
            report.report(cfg)
        except (artifacts.ArtifactError, FileNotFoundError, ValueError) as err:  # named by the inputs' path
            raise type(err)(str(err).replace(str(copy), str(inputs))) from None
        return _publish(layout.report_dir(cfg), Path(out))


def _check_probes(cfg: Config, inputs: Path) -> None:
    """Every probe folder of the inputs is one the params name here (its name holds the digest
    of the model's files): else the report would go on without it and differ."""
    named = set(probe_folders(cfg).values())
    for manifest in sorted((inputs / "probe").glob(f"*/*/{layout.MANIFEST}")):
        folder = manifest.parent.relative_to(inputs)
        if folder not in named:
            raise ValueError(f"{inputs / folder}: a probe the params do not name here: a probe folder's name is its "
                             f"key, which holds the digest of the files of model.path = {cfg.model.path!r} (and of a "
                             f"local dataset file); those files differ here from where it was probed, so this report "
                             f"cannot be re-rendered on this machine (expected one of {sorted(map(str, named))})")


def _publish(report_dir: Path, out: Path) -> list[str]:
    new = report_files(report_dir)
    _clear(out, RENDERED, sorted(report_files(out)), sorted(new))
    for name in sorted(new):
        shutil.copyfile(report_dir / name, out / name)
    _record(out, RENDERED, new)
    return sorted(new)


def report_files(folder: Path) -> set[str]:
    """The names of the report files in ``folder`` (:data:`COMMITTED`, not :data:`NOT_RENDERED`)."""
    return {p.name for pattern in COMMITTED for p in Path(folder).glob(pattern)
            if p.is_file() and p.name not in NOT_RENDERED}


def differences(rendered: Path, committed: Path) -> list[str]:
    """How the committed report in ``committed`` differs from ``rendered``, file by file (bytes;
    for a text file its first differing line); empty when they are the same."""
    ours, theirs = report_files(rendered), report_files(committed)
    found = [f"{n}: committed, but today's analysis does not write it" for n in sorted(theirs - ours)]
    found += [f"{n}: written by today's analysis, not committed" for n in sorted(ours - theirs)]
    for name in sorted(ours & theirs):
        a, b = (Path(rendered) / name).read_bytes(), (Path(committed) / name).read_bytes()
        if a != b:
            found.append(f"{name}: differs" + ("" if name.endswith(".png") else _first_difference(a, b)))
    return found


def _first_difference(rendered: bytes, committed: bytes) -> str:
    new, old = rendered.decode().splitlines(), committed.decode().splitlines()
    i = next((i for i, (x, y) in enumerate(zip(new, old)) if x != y), min(len(new), len(old)))
    line = lambda lines: repr(lines[i]) if i < len(lines) else "(no line)"  # noqa: E731
    return f" at line {i + 1}: today's {line(new)}, committed {line(old)}"


def results(study: str) -> dict[str, int]:
    """``make results``: export ``outputs/<study>/`` into ``docs/results/<study>/inputs/``, render the
    report there from it, and copy the study's ``timings.json`` beside it; return the inputs' sizes.

    The new inputs and report are built beside the old ones (``docs/results/.<study>.building``,
    with the old folder's other files copied in) and swapped in, folder for folder, only after the
    render succeeded: a failed or interrupted render leaves the old pair as it was. ``study`` is a
    name (:func:`check_study`), and one ``make results`` of it runs at a time (:func:`writing`):
    a second is refused before it touches anything."""
    folder = results_dir(study)
    source = artifacts.outputs_root() / study
    if not (source / "report" / layout.PARAMS).is_file():
        raise FileNotFoundError(f"{source}: no analysed study {study!r} there (no report/{layout.PARAMS}); run "
                                f"`make study STUDY={study}` first, or name one of "
                                f"{sorted(p.parent.parent.name for p in source.parent.glob('*/report/' + layout.PARAMS))}")
    with writing(folder):
        return _results(source, folder)


def _results(source: Path, folder: Path) -> dict[str, int]:
    building, replaced = _recover(folder)
    if folder.exists():
        _check_replaceable(folder)
    try:
        sizes = export(source, building / "inputs")
        render(building / "inputs", building)
        if (source / layout.TIMINGS).is_file():
            shutil.copyfile(source / layout.TIMINGS, building / layout.TIMINGS)
        _keep_the_rest(folder, building)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    if folder.exists():
        folder.rename(replaced)
    building.rename(folder)
    shutil.rmtree(replaced, ignore_errors=True)
    return sizes


def _recover(folder: Path) -> tuple[Path, Path]:
    """The two folders :func:`results` swaps through, beside ``folder``: an interrupted earlier
    swap's old report is put back, a half-built new one removed (both are :func:`results`' own)."""
    building, replaced = (folder.with_name(f".{folder.name}.{what}") for what in ("building", "replaced"))
    if replaced.exists() and not folder.exists():
        replaced.rename(folder)
    for leftover in (building, replaced):
        shutil.rmtree(leftover, ignore_errors=True)
    return building, replaced


def _check_replaceable(folder: Path) -> None:
    """Refuse, before anything is built, a committed folder whose inputs or report files hold a file
    no export or render recorded (the swap would drop it)."""
    _clear_check(folder / "inputs", EXPORTED, _all_files(folder / "inputs"))
    _clear_check(folder, RENDERED, sorted(report_files(folder)))


def _keep_the_rest(folder: Path, building: Path) -> None:
    """Copy into the new folder what the old one holds that no export or render wrote (its README,
    anything a user put there), so the swap loses nothing."""
    if not folder.exists():
        return
    ours = written_before(folder, RENDERED) | {RENDERED, "inputs"}
    for p in sorted(folder.iterdir()):
        if p.name in ours or (p.name == layout.TIMINGS and (building / p.name).exists()):
            continue
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, building / p.name)


#: why the report reads each kind of file (what :func:`describe` says of the largest)
READ_FOR = {layout.STEPS: "TRL's metrics per step: completion length and truncation (confounds)",
            layout.GROUPS: "every group's rewards: learnable %", layout.PROMPTS: "p_hat per prompt",
            layout.SAMPLES: "every sample's score: per-prompt scores (eval), K sweep (probe)",
            layout.EVAL_SUMMARY: "accuracy per checkpoint", layout.EVAL_TIERS: "accuracy per tier"}


def describe(sizes: dict[str, int], largest: int = 5) -> str:
    """The inputs' size, in all and per top folder, and their largest files with what they are read for."""
    tops: dict[str, int] = {}
    for rel, n in sizes.items():
        tops[rel.split("/")[0]] = tops.get(rel.split("/")[0], 0) + n
    lines = [f"inputs: {len(sizes)} files, {sum(sizes.values()) / 1024:,.0f} KiB"]
    lines += [f"  {top + '/':<16} {n / 1024:>9,.0f} KiB" for top, n in sorted(tops.items())]
    lines += ["largest:"] + [f"  {rel} {n / 1024:,.0f} KiB: {READ_FOR.get(Path(rel).name, 'a record')}"
                             for rel, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:largest]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m diffgrpo.analysis.inputs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="copy what a study's report reads into an inputs folder")
    e.add_argument("study_dir", type=Path)
    e.add_argument("dest", type=Path)
    r = sub.add_parser("render", help="write the report of an inputs folder into a folder")
    r.add_argument("inputs", type=Path)
    r.add_argument("out", type=Path)
    b = sub.add_parser("results", help="both, outputs/<study> into docs/results/<study>")
    b.add_argument("study")
    args = ap.parse_args(argv)
    swapped = "make results swaps nothing in before its render succeeded"
    return errors.run(lambda: _command(args), stopped=f"stopped; rerun the same command ({swapped})",
                      also=(FileExistsError, FileNotFoundError, ValueError), storage_note=swapped)


def _command(args: argparse.Namespace) -> int:
    if args.command == "export":
        print(describe(export(args.study_dir, args.dest)))
    elif args.command == "render":
        print(f"{len(render(args.inputs, args.out))} report files in {args.out}")
    else:
        print(describe(results(args.study)))
        print(f"report re-rendered from its inputs into {results_dir(args.study)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
