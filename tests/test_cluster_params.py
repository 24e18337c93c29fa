"""The `cluster:` params section, campaigns and --status: what needs no Slurm (the cluster itself:
tests/test_cluster.py, marked `cluster`)."""

import pytest
import yaml

from diffgrpo.params import cluster
from diffgrpo.store import layout
from diffgrpo import params, study
from diffgrpo.study import graph
from diffgrpo.params import ParamsError


def test_defaults_set_every_cluster_key_and_a_gpu_study_asks_a_gpu_where_it_runs_the_model():
    c = cluster.settings(params.load())
    assert (c.partition, c.account, c.qos, c.gpus, c.stages, c.sbatch) == (None, None, None, 0, {}, {})
    assert c.resources("03_train") == {"timeout_min": 240, "cpus_per_task": 1, "mem_gb": 8,
                                       "slurm_additional_parameters": {}}
    g = cluster.settings(params.load("paper003_gsm8k_qwen3_4b"))
    assert g.resources("03_train")["gpus_per_node"] == 1 and g.resources("01_probe")["gpus_per_node"] == 1
    assert "gpus_per_node" not in g.resources("02_select") and g.resources("02_select")["timeout_min"] == 60
    assert g.resources("05_analyze")["mem_gb"] == 16 and g.resources("04_evaluate")["mem_gb"] == 64


def test_defaults_yaml_sets_every_key_of_the_cluster_schema_and_the_schema_none():
    raw = yaml.safe_load((params.params_dir() / "defaults.yaml").read_text())["cluster"]
    assert set(raw) == set(cluster.ClusterConfig.model_fields)
    assert all(f.is_required() for f in cluster.ClusterConfig.model_fields.values())  # defaults: one place


def test_a_study_file_sets_some_cluster_keys_and_keeps_the_rest(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("include: gpu\nstudy: s\ncluster:\n  partition: a100\n  account: lab\n"
                 "  stages:\n    03_train: {time: 1-00:00:00}\n  sbatch: {constraint: a100, exclude: node07}\n")
    c = cluster.settings(params.load(f, overrides={"cluster.qos": "high"}))
    r = c.resources("03_train")
    assert (r["slurm_partition"], r["slurm_account"], r["slurm_qos"]) == ("a100", "lab", "high")
    assert r["timeout_min"] == 24 * 60 and r["gpus_per_node"] == 1 and r["cpus_per_task"] == 8  # gpu.yaml's
    assert r["slurm_additional_parameters"] == {"constraint": "a100", "exclude": "node07"}
    assert c.resources("02_select")["timeout_min"] == 60  # gpu.yaml's stage setting survives the new stage


@pytest.mark.parametrize("text, message", [
    ("cluster:\n  cpu: 2\n", r"unknown key `cluster.cpu` \(did you mean `cluster.cpus`\?\); known keys here: \['account', 'cpus'"),
    ("cluster:\n  cpus: 0\n", r"`cluster.cpus` = 0: Input should be greater than or equal to 1"),
    ("cluster:\n  mem_gb: lots\n", r"`cluster.mem_gb` = 'lots'"),
    ("cluster:\n  time: 4h\n", r"`cluster.time` = '4h': '4h' is not a Slurm time limit"),
    ("cluster:\n  stages: {03_trian: {gpus: 1}}\n", r"`cluster.stages.03_trian`: '03_trian' is not a stage"),
    ("cluster:\n  stages: {03_train: {gpu: 1}}\n", r"unknown key `cluster.stages.03_train.gpu`; known keys here: "
                                                  r"\['cpus', 'gpus', 'mem_gb', 'time'\]"),
    ("cluster:\n  stages: {03_train: {time: 0}}\n", r"`cluster.stages.03_train.time` = 0: 0: a time limit must be"),
    ("cluster:\n  sbatch: {dependency: 'afterok:1'}\n", r"`cluster.sbatch.dependency` is not yours to set here: "
                                                          r"the study's graph"),
    ("cluster:\n  sbatch: {'--Bad Option': 1}\n", r"`cluster.sbatch.--Bad Option` is not an sbatch long option"),
    ("cluster: gpu\n", r"`cluster` = 'gpu': Input should be a valid dictionary"),
])
def test_a_bad_cluster_key_is_an_error_naming_the_file_and_the_key(tmp_path, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ParamsError, match=rf"^{f}: .*{message}"):
        params.load(f)


def test_cluster_and_report_to_are_no_part_of_a_run_key():
    cfg = params.load("tiny")
    other = cfg.replace(**{"cluster.partition": "gpu", "cluster.gpus": 4, "train.report_to": "none"})
    assert layout.run_key(other, ["a"]) == layout.run_key(cfg, ["a"])
    assert layout.run_key(cfg.replace(**{"train.learning_rate": 0.1}), ["a"]) != layout.run_key(cfg, ["a"])


@pytest.mark.parametrize("value", ["tensorboard", "trackio", "wandb", "mlflow", "none"])
def test_report_to_takes_trls_trackers_and_nothing_else(value):
    assert params.load(overrides={"train.report_to": value}).train.report_to == value
    with pytest.raises(ParamsError, match=r"`train.report_to` = 'tensorbord': Input should be 'tensorboard', 'trackio', 'wandb', 'mlflow' or 'none'"):
        params.load(overrides={"train.report_to": "tensorbord"})


@pytest.mark.parametrize("time, minutes", [(90, 90), ("90", 90), ("1:30", 2), ("4:00:00", 240), ("1-0", 1440),
                                           ("2-12:30", 3630), ("1-00:00:01", 1441)])
def test_slurm_time_limits_read_as_sbatch_reads_them(time, minutes):
    assert cluster.minutes(time) == minutes


def test_a_campaign_runs_every_compared_study_and_the_last_analysis_waits_for_all():
    entries = params.load("paper003_gpu").analyze.compare
    studies = []
    for e in entries:
        cfg = params.load(e)
        studies.append((cfg, {"params_file": e, "overrides": {}}))
    todo, owner = graph.campaign_jobs(studies)
    names = [c.study for c, _ in studies]
    alone = {n: graph.jobs(c, nb) for n, (c, nb) in zip(names, studies)}
    assert len(todo) == sum(len(j) for j in alone.values())
    by_name = {j.name: j for j in todo}
    for n in names:  # each study's graph, its names prefixed
        for j in alone[n]:
            mine = by_name[f"{n}/{j.name}"]
            assert owner[mine.name][1] == j.name and mine.out_path == j.out_path
            if j.name != "05_analyze" or n != names[-1]:
                assert mine.after == tuple(f"{n}/{a}" for a in j.after)
    last = by_name[f"{names[-1]}/05_analyze"]
    assert set(last.after) >= {f"{n}/05_analyze" for n in names[:-1]}
    place = study.placement(owner)(by_name[f"{names[0]}/03_train hard-seed0"])
    assert place.job_name == f"{names[0]}/03_train/hard-seed0" and place.key == "03_train hard-seed0"
    assert place.folder == layout.slurm_dir(studies[0][0]) and place.resources["gpus_per_node"] == 1


def test_a_campaign_of_a_file_that_compares_nothing_is_refused(capsys):
    assert study.cli(["tiny", "--campaign", "--status"]) == 2
    assert "--campaign runs the studies that `analyze.compare` names, and it names none" in capsys.readouterr().err


@pytest.mark.e2e
def test_status_of_a_local_study_reads_its_files(tmp_path, monkeypatch, capsys):
    """--status needs no Slurm: a study never run is `not submitted`; a notebook that failed
    here is `failed`, with its error and its log; a finished one is `done`."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.main(["smoke", "--status"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "14 not submitted" and out.splitlines()[0].split() == ["not", "submitted", "01_probe"]
    assert not (tmp_path / "smoke").exists()  # it runs nothing, and writes nothing
    assert study.cli(["smoke", "--stages", "02_select", "--kernel", "python3"]) == 1  # no probe yet
    capsys.readouterr()
    assert study.main(["smoke", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [failed] = [i for i, ln in enumerate(lines) if ln.startswith("failed")]
    assert lines[failed].split()[:2] == ["failed", "02_select"] and "run the probe stage (01_probe) first" in lines[failed]
    more = " ".join(lines[failed + 1:failed + 3])  # the failed notebook and the log, on lines of their own
    assert f"its output is in {tmp_path / 'smoke' / 'notebooks' / '02_select.log'}" in more
    assert f"{tmp_path / 'smoke' / 'notebooks' / '02_select.failed.ipynb'}" in more
    assert lines[-1] == "1 failed, 13 not submitted"


def test_detach_without_a_cluster_is_refused(capsys):
    with pytest.raises(SystemExit):
        study.main(["tiny", "--detach"])
    assert "--detach submits to a cluster: add --executor slurm" in capsys.readouterr().err
