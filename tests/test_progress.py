"""diffgrpo.progress: the bar each long loop shows, chosen by where it runs (a terminal, a
JupyterLab kernel, a notebook papermill executes)."""

import io

import pytest

from diffgrpo import progress


def test_a_record_prints_a_line_per_quarter_and_one_at_the_end():
    out = io.StringIO()
    bar = progress.Record(30, "hard-seed0", unit="step", file=out)
    for step in range(30):
        bar.update()
        bar.set_postfix(reward="0.83", learnable="0.75")
    bar.close()
    bar.close()  # a second close prints nothing more
    lines = out.getvalue().splitlines()
    assert [line.split(" after ")[0].split(" in ")[0] for line in lines] == [
        "hard-seed0: 8/30 step (27%)", "hard-seed0: 15/30 step (50%)", "hard-seed0: 23/30 step (77%)",
        "hard-seed0: 30/30 step (100%)"]
    assert lines[-1].endswith("reward=0.83, learnable=0.75") and "\r" not in out.getvalue()


def test_a_resumed_record_does_not_repeat_the_quarters_already_passed():
    out = io.StringIO()
    bar = progress.Record(100, "probe K=8", unit="prompt", initial=60, file=out)
    bar.update(40)
    bar.close()
    assert [line.split(" in ")[0] for line in out.getvalue().splitlines()] == [
        "probe K=8: 100/100 prompt (100%)"]


def test_the_mode_is_the_environment_variable_when_set(monkeypatch):
    monkeypatch.setenv(progress.ENV, "record")
    assert progress.mode() == "record" and isinstance(progress.bar(5, "x"), progress.Record)
    monkeypatch.setenv(progress.ENV, "off")
    assert progress.bar(5, "x").disable
    monkeypatch.setenv(progress.ENV, "widgets")
    with pytest.raises(ValueError, match=r"DIFFGRPO_PROGRESS='widgets': not a progress mode"):
        progress.mode()


def test_outside_a_kernel_the_bar_is_text(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert progress.mode() == "text"
    bar = progress.bar(3, "x", disable=True)  # disabled: shows nothing whatever the mode
    assert bar.disable
