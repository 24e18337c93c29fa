"""Extension by one file, outside the repository too (issue 16): docs/examples/my_plugin.py,
copied to a folder of its own, adds a selection policy, a reward and a task that a tiny study
probes, selects and trains with; a name nobody registered says which are and where plugins go."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from diffgrpo.store import artifacts, layout
from diffgrpo import params, policies, probe, rewards, select, tasks, train
from diffgrpo.params import ParamsError

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "my_plugin.py"


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def study_file(folder: Path, **extra) -> Path:
    shutil.copy(EXAMPLE, folder / "my_plugin.py")
    f = folder / "study.yaml"
    f.write_text(yaml.safe_dump({
        "include": "tiny", "study": "plugin_study", "plugins": ["my_plugin.py"],
        "arms": [{"name": "solved", "select": "hard_but_solved", "reward": "partial_credit", "budget_count": 4}],
        "train": {"max_steps": 2, "save_steps": 2}, **extra}))
    return f


@pytest.mark.e2e
def test_a_plugin_outside_the_repository_adds_a_policy_and_a_reward_a_tiny_study_trains_with(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "outputs"))
    elsewhere = tmp_path / "my_research"
    elsewhere.mkdir()
    cfg = params.load(study_file(elsewhere))
    assert cfg.plugins == [str((elsewhere / "my_plugin.py").resolve())]  # recorded absolute: notebooks find it
    assert {"hard_but_solved"} <= set(policies.names()) and "partial_credit" in rewards.names()

    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    prompts = probe.read_prompts(cfg)
    chosen = artifacts.read_parquet(layout.selection_file(cfg, "solved"), "02_select")
    solved = prompts[prompts["p_hat"] > 0]
    # the policy's definition: 4 prompts, each solved at least once, none easier than one left out
    assert len(chosen) == 4 and (chosen["p_hat"] > 0).all() and set(chosen["id"]) <= set(solved["id"])
    assert chosen["p_hat"].max() <= solved[~solved["id"].isin(chosen["id"])]["p_hat"].min()

    run = train.train_run(cfg, "solved", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    got, scores = np.concatenate(groups["rewards"].to_list()), np.concatenate(groups["scores"].to_list())
    assert len(groups) == 2 * cfg.train.prompts_per_step
    assert set(np.unique(got)) <= {0.0, 0.2, 1.0}
    assert ((got == 1.0) == (scores == 1.0)).all()  # full credit exactly when the verifier says right
    # learnable % is that of the rewards trained on: partial credit can make a wrong-only group mixed
    assert (groups["learnable"] == groups["rewards"].map(lambda r: max(r) > min(r))).all()
    manifest = artifacts.read_json(run / "manifest.json")
    assert manifest["select"] == "hard_but_solved" and manifest["reward"]["weights"] == {"partial_credit": 1.0}
    assert manifest["key"]["reward"]["kind"] == "partial_credit"  # a run on another reward has another key
    assert (run / "checkpoints" / "checkpoint-2").is_dir()

    # the task it registers is known by name, like a packaged one
    assert list(tasks.get("few_people_objects").people) == [3, 3]


def test_a_name_registered_twice_from_two_places_is_refused(tmp_path):
    params.load(study_file(tmp_path))
    (tmp_path / "again.py").write_text("from diffgrpo import policies\n\n@policies.register('hard_but_solved')\n"
                                       "def other(prompts, n, rng):\n    return prompts\n")
    with pytest.raises(ParamsError, match=r"failed to import: ValueError: selection policy 'hard_but_solved' is "
                                          r"registered twice"):
        params.load_plugin(str(tmp_path / "again.py"), str(tmp_path / "study.yaml"))


def test_an_edited_reward_gets_a_run_key_of_its_own(tmp_path):
    rows = pd.DataFrame({"p_hat": [0.5]})
    cfg = params.load(study_file(tmp_path))
    first = rewards.get("partial_credit").run_key(rows, 0)
    edited = tmp_path / "v2"
    edited.mkdir()
    shutil.copy(EXAMPLE, edited / "my_plugin.py")
    text = (edited / "my_plugin.py").read_text().replace("0.2 if readable", "0.3 if readable")
    for name in ("partial_credit", "hard_but_solved", "few_people_objects"):  # a second registration elsewhere is refused
        text = text.replace(f'"{name}"', f'"{name}_v2"')
    (edited / "my_plugin.py").write_text(text)
    params.load_plugin(str(edited / "my_plugin.py"), str(edited / "study.yaml"))
    assert rewards.get("partial_credit_v2").run_key(rows, 0)["source_sha256"] != first["source_sha256"]
    assert not cfg.arm("solved").is_control  # partial credit is an ordinary arm's reward: only `role: control` is a control


@pytest.mark.parametrize("arm, message", [
    ({"name": "x", "select": "nobody_registered_this"},
     r"unknown selection policy 'nobody_registered_this'; registered: \[.*'hard_but_solved'.*\].*plugin file listed in `plugins:`"),
    ({"name": "x", "select": "hard", "reward": "no_such_reward"},
     r"unknown reward 'no_such_reward'; registered: \[.*'partial_credit'.*\].*plugins:"),
    ({"name": "x", "select": "hard_but_solved", "options": {"min_p_hat": 0.1, "max_p_hat": 0.9}},
     r"policy 'hard_but_solved' takes no option 'max_p_hat'"),
])
def test_an_unknown_name_says_which_are_registered_and_where_plugins_go(tmp_path, arm, message):
    with pytest.raises(ParamsError, match=message):
        params.load(study_file(tmp_path, arms=[arm]))


def test_a_plugin_that_fails_to_import_or_is_missing_is_named(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('half-written plugin')\n")
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"include": "tiny", "plugins": ["broken.py"]}))
    with pytest.raises(ParamsError, match=rf"{f}: plugin {tmp_path / 'broken.py'} failed to import: RuntimeError: half-written"):
        params.load(f)
    f.write_text(yaml.safe_dump({"include": "tiny", "plugins": ["nothere.py"]}))
    with pytest.raises(ParamsError, match=r"plugin file 'nothere.py' not found"):
        params.load(f)
    f.write_text(yaml.safe_dump({"include": "tiny", "plugins": ["no_such_module_xyz"]}))
    with pytest.raises(ParamsError, match=r"plugin module 'no_such_module_xyz' does not import"):
        params.load(f)


def test_one_registry_mechanism_loads_a_builtin_from_its_module_on_first_use():
    import json

    from diffgrpo import registry
    from diffgrpo.study import executors

    things = registry.Registry("thing", KeyError, {"json": "json"})
    assert "json" in things and things.names() == ["json"]
    assert things.get("json") is json  # a module that registers nothing is the entry itself
    with pytest.raises(KeyError, match=r"unknown thing 'nope'; registered: \['json'\]"):
        things.get("nope")
    assert registry.PAPERS.names() == ["003", "001", "000", "002"] and "001" in registry.PAPERS
    assert executors.EXECUTORS.names() == ["local", "slurm"]
    assert executors.EXECUTORS.get("slurm").__module__ == "diffgrpo.study.slurm"  # imported when asked for
    assert "gsm8k" in tasks.TASKS.names()


def test_an_edited_helper_beside_a_reward_plugin_retrains_the_run(tmp_path, monkeypatch):
    """Issue 30: the reward's function is unchanged, the helper it imports from beside it is
    edited; the run key follows the helper (the plugin's whole file and its local imports), so
    the run is trained anew rather than reused."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "bonus_helper.py").write_text("def bonus(text):\n    return 0.1 * ('answer' in text)\n")
    (folder / "bonus_reward.py").write_text(
        "from diffgrpo import rewards\nfrom bonus_helper import bonus\n\n\n"
        "@rewards.register('with_bonus')\n"
        "def with_bonus(prompts, completions, completion_ids=None, *, scores, **kwargs):\n"
        "    return [s + bonus(rewards.text(c)) for c, s in zip(completions, scores)]\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump({"include": "tiny", "study": "helper_study", "plugins": [str(folder / "bonus_reward.py")],
                                 "arms": [{"name": "bonus", "select": "hard", "reward": "with_bonus"}],
                                 "train": {"max_steps": 1, "save_steps": 1}}))
    cfg = params.load(f)
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    run = train.train_run(cfg, "bonus", 0, progress=False)
    first = artifacts.read_json(run / layout.MANIFEST)
    (folder / "bonus_helper.py").write_text("def bonus(text):\n    return 0.5 * ('answer' in text)\n")
    with pytest.warns(UserWarning, match="trained with other settings"):
        train.train_run(cfg, "bonus", 0, progress=False)
    second = artifacts.read_json(run / layout.MANIFEST)
    assert second["key"]["reward"]["source_sha256"] != first["key"]["reward"]["source_sha256"]
    assert second["status"] == "complete" and second["resumed_from"] == []


ONLINE_PLUGIN = '''
from diffgrpo import online


class Settings(online.Settings):
    every: online.PosInt = 2  # the sampler's prompts at every `every`-th position are kept


@online.register("every_other")
class EveryOther(online.Method):
    """Keeps the sampler's first prompt and fills the step with the selection's first prompts."""
    Settings = Settings
    when = "before"

    def choose(self, batch, history, step):
        return ([batch[0]] + [p for p in self.ids if p != batch[0]])[:len(batch)], len(batch) - 1
'''


@pytest.mark.e2e
def test_a_plugin_online_method_outside_the_repository_trains_a_tiny_study(tmp_path, monkeypatch):
    """An online method is one file: its settings are validated (an unknown key refused), and the
    tiny model trains with it."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "outputs"))
    (tmp_path / "every_other.py").write_text(ONLINE_PLUGIN)
    f = tmp_path / "study.yaml"
    body = {"include": "tiny", "study": "online_plugin", "plugins": ["every_other.py"],
            "arms": [{"name": "mine", "select": "random", "budget_count": 8,
                      "train": {"online": {"method": "every_other", "every": 3}}}],
            "train": {"max_steps": 2, "save_steps": 2}}
    f.write_text(yaml.safe_dump(body))
    cfg = params.load(f)
    from diffgrpo import online

    assert "every_other" in online.names() and cfg.for_arm("mine").train.online.every == 3
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    run = train.train_run(cfg, "mine", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    assert len(groups) == 2 * cfg.train.prompts_per_step
    assert (pd.read_parquet(run / "steps.parquet")["online_skipped"] == cfg.train.prompts_per_step - 1).all()
    body["arms"][0]["train"]["online"]["evry"] = 2
    f.write_text(yaml.safe_dump(body))
    with pytest.raises(ParamsError, match=r"train.online.evry.*did you mean"):
        params.load(f)
