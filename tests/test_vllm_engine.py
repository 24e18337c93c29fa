"""The project's vLLM backend on vLLM's real engine: vLLM's CPU build in ``.venv-vllm``.

``make vllm-env && make test-vllm`` runs these tests (marker ``vllm``); in an environment without
vLLM they skip. Nothing here is a mock: a tiny study on the embedded model runs its probe and
evaluation through the stage notebooks with ``generation.backend: vllm`` (its training on HF
generation, as on any CPU), its checkpoints served as LoRA requests by one engine per evaluation
process; then its completions are held against the HF backend's on the same prompt token ids.

What is compared, and how (docs/gpu.md, "vLLM on a CPU"): greedy text of the base model and of a
trained checkpoint (the agreement rate and the first differing token are printed; fp32 on both
sides, so they are expected identical, and a difference is held to a small share); sampled p_hat
per prompt within binomial error (vLLM's random numbers are not torch's: only the distribution
can agree); ``num_tokens`` and ``finished`` equal wherever the text is; a probe killed with
SIGKILL mid-way resumes, in a new engine, to what one uninterrupted engine gives; the named
errors fire against the real engine's limits.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo import params
from diffgrpo.store import layout

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(
    not HAVE_VLLM, reason="needs vLLM: `make vllm-env`, then `make test-vllm` (.venv-vllm, vLLM's CPU build; docs/gpu.md)")]

ROOT = Path(__file__).resolve().parents[1]
#: the tiny study, two arms, one notebook at a time (each evaluation notebook starts its engine)
OVERRIDES = {"generation.backend": "vllm", "arms": ["hard", "random"], "workers": 1}
STAGES = ["01_probe", "02_select", "03_train", "04_evaluate", "05_analyze"]


def cfg_vllm(**more) -> params.Config:
    return params.load("tiny", overrides={**OVERRIDES, **more})


@pytest.fixture(scope="module")
def study():
    """The tiny study through its notebooks, in this environment's Jupyter kernel (in a folder
    of its own: pytest's numbered temporary folders are pruned by any later session)."""
    from jupyter_client.kernelspec import KernelSpecManager

    kernel = KernelSpecManager().get_kernel_spec("diffgrpo")
    assert Path(kernel.argv[0]).resolve().parent == Path(sys.executable).resolve().parent, \
        f"the kernel 'diffgrpo' runs {kernel.argv[0]}, not this environment's python (make vllm-env registers it)"
    outputs = Path(tempfile.mkdtemp(prefix="diffgrpo-vllm-study-"))
    argv = [sys.executable, "-m", "diffgrpo.study", "tiny", "--kernel", "diffgrpo", "--stages", *STAGES]
    argv += [f"--set={k}={json.dumps(v)}" for k, v in OVERRIDES.items()]
    env = {**os.environ, "DIFFGRPO_OUTPUTS": str(outputs)}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    before = os.environ["DIFFGRPO_OUTPUTS"]
    os.environ["DIFFGRPO_OUTPUTS"] = str(outputs)  # what layout reads (the session's folder otherwise)
    yield cfg_vllm()
    os.environ["DIFFGRPO_OUTPUTS"] = before
    shutil.rmtree(outputs, ignore_errors=True)


@pytest.fixture(scope="module")
def vllm_gen():
    """This process's engine, as the evaluation builds it (LoRA on: the base and checkpoints)."""
    from diffgrpo.models import resumable_sampling, vllm_engine

    yield resumable_sampling.load_generator(cfg_vllm(), batch_size=64, serve_adapters=True)
    vllm_engine.shutdown()


def hf_gen(cfg, adapter=None):
    from diffgrpo.models import resumable_sampling

    return resumable_sampling.load_generator(cfg.replace(**{"generation.backend": "hf"}), batch_size=64, adapter=adapter)


def test_the_study_probed_and_evaluated_on_vllm(study):
    from diffgrpo import evaluate

    probe = json.loads((layout.probe_dir(study) / layout.MANIFEST).read_text())
    assert probe["complete"] and probe["key"]["backend"] == "vllm"
    for arm in ("hard", "random"):
        rid = layout.run_id(arm, 0)
        summary = pd.read_parquet(layout.eval_dir(study, rid) / layout.EVAL_SUMMARY)
        assert sorted(summary["step"]) == [0, 2, 4]  # the base as step 0, both checkpoints
        m = json.loads((layout.eval_dir(study, rid) / layout.MANIFEST).read_text())
        assert m["key"]["backend"] == "vllm"
        assert set(evaluate.checkpoints(layout.run_dir(study, arm, 0))) == {2, 4}
    assert (layout.eval_dir(study, layout.BASE_RUN, "ood_swaps") / layout.EVAL_SUMMARY).exists()


def _greedy_of_study(cfg, rid: str, step: int) -> pd.DataFrame:
    """The evaluation's greedy completions at ``step`` (0: the base model's own evaluation)."""
    s = pd.read_parquet(layout.eval_dir(cfg, layout.BASE_RUN if step == 0 else rid) / layout.SAMPLES)
    return s[(s["mode"] == "greedy") & (s["step"] == step)].set_index("prompt_id")


def _agreement(tokenizer, vllm_texts: list[str], hf_texts: list[str]) -> tuple[float, str]:
    """Share of identical texts, and where the first pair that differs parts (by token)."""
    same = [a == b for a, b in zip(vllm_texts, hf_texts)]
    first = ""
    for a, b in zip(vllm_texts, hf_texts):
        if a != b:
            ta, tb = tokenizer(a)["input_ids"], tokenizer(b)["input_ids"]
            k = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
            first = f"token {k}: vLLM {tokenizer.decode(ta[k:k + 1])!r} vs HF {tokenizer.decode(tb[k:k + 1])!r}"
            break
    return sum(same) / len(same), first


@pytest.mark.parametrize("step", [0, 4], ids=["base", "checkpoint-4"])
def test_greedy_matches_hf_generate(study, step):
    """The evaluation notebook's greedy completions (vLLM; the checkpoint a LoRA request) against
    HF generate on the same prompt token ids (the checkpoint merged into the base)."""
    from diffgrpo import evaluate
    from diffgrpo.tasks import splits

    rid = layout.run_id("hard", 0)
    rows = splits.load_test(study)
    adapter = evaluate.checkpoints(layout.run_dir(study, "hard", 0))[step] if step else None
    ours = _greedy_of_study(study, rid, step).loc[list(rows["id"])]
    hf = hf_gen(study, adapter)
    ev = study.evaluate.sampling
    theirs = [c[0] for c in hf.generate(list(rows["prompt"]), n=1, temperature=0.0, max_new_tokens=ev.max_new_tokens,
                                        seed=study.evaluate.seed, progress=False)]
    rate, first = _agreement(hf.tokenizer, list(ours["completion"]), [c.text for c in theirs])
    print(f"\ngreedy parity, {'base' if not step else f'checkpoint-{step}'}: {rate:.3f} of {len(rows)} identical "
          f"{first or '(no difference)'}")
    assert rate >= 0.9, f"vLLM and HF greedy agree on {rate:.2f} only; first difference at {first}"
    for (_, v), h in zip(ours.iterrows(), theirs):  # num_tokens and finished mean the same
        if v["completion"] == h.text:
            assert (v["num_tokens"], v["finished"]) == (h.num_tokens, h.finished)


def test_a_lora_request_is_the_merged_adapter(vllm_gen, tmp_path):
    """The tiny study's 4 training steps leave greedy text as the base's, so a checkpoint's parity
    alone would not show that the adapter is applied. An adapter with random A and B (PEFT's
    init_lora_weights=False), rank 8 on every projection, changes it: served as a LoRA request it
    gives what HF gives with the adapter merged, and not what the base gives."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from diffgrpo.models import resumable_sampling
    from diffgrpo.models.embedded import default_path
    from diffgrpo.tasks import splits

    cfg = cfg_vllm()
    adapter = tmp_path / "checkpoint-1"
    model = AutoModelForCausalLM.from_pretrained(default_path())
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    get_peft_model(model, LoraConfig(r=8, lora_alpha=8, target_modules=targets, init_lora_weights=False)
                   ).save_pretrained(adapter)
    prompts = list(splits.load_test(cfg)["prompt"])
    kw = dict(n=1, temperature=0.0, max_new_tokens=cfg.evaluate.sampling.max_new_tokens, progress=False)
    served = resumable_sampling.load_generator(cfg, batch_size=64, adapter=adapter, serve_adapters=True)
    assert served.llm is vllm_gen.llm  # the one engine, a LoRA request
    ours = [c[0].text for c in served.generate(prompts, **kw)]
    base = [c[0].text for c in vllm_gen.generate(prompts, **kw)]
    hf = hf_gen(cfg, adapter)
    theirs = [c[0].text for c in hf.generate(prompts, **kw)]
    rate, first = _agreement(hf.tokenizer, ours, theirs)
    print(f"\ngreedy parity, a random rank-8 adapter: {rate:.3f} of {len(prompts)} identical {first or '(no difference)'}; "
          f"{sum(a != b for a, b in zip(ours, base))} of {len(prompts)} differ from the base")
    assert sum(a != b for a, b in zip(ours, base)) >= len(prompts) // 2
    assert rate >= 0.9, f"vLLM's LoRA request and HF's merged adapter agree on {rate:.2f}; first difference at {first}"


def test_num_tokens_and_finished_mean_the_same(study, vllm_gen):
    """Cut at max_new_tokens (finished False, num_tokens the limit) and stopped at EOS (finished
    True, the EOS counted) alike in both backends, greedy, on the same prompts."""
    from diffgrpo.tasks import splits

    prompts = list(splits.load_pool(study)["prompt"][:16])
    hf = hf_gen(study)
    for limit in (12, study.probe.sampling.max_new_tokens):
        ours = [c[0] for c in vllm_gen.generate(prompts, n=2, temperature=0.0, max_new_tokens=limit, progress=False)]
        theirs = [c[0] for c in hf.generate(prompts, n=1, temperature=0.0, max_new_tokens=limit, progress=False)]
        assert sum(a == b for a, b in zip(ours, theirs)) >= 0.9 * len(prompts), (limit, ours, theirs)
        for a in ours:
            assert a.finished or a.num_tokens == limit
            assert a.num_tokens == len(hf.tokenizer(a.text)["input_ids"]) + a.finished  # EOS counted once
    cut = vllm_gen.generate(prompts, n=1, temperature=0.0, max_new_tokens=12, progress=False)
    assert not any(c[0].finished for c in cut)
    full = vllm_gen.generate(prompts, n=3, temperature=0.0, max_new_tokens=study.probe.sampling.max_new_tokens,
                             progress=False)
    assert all(c[0].finished for c in full) and all(len(set(c)) == 1 and len(c) == 3 for c in full)  # n greedy copies


def test_sampled_p_hat_agrees_within_binomial_error(study, vllm_gen):
    """16 pool prompts x 64 samples at the probe's settings, per prompt: the two p_hat differ by
    less than 3.5 standard errors of a difference of two binomial proportions (a 16-fold
    comparison at a 0.05 family-wise level needs 3.0), the pooled p_hat in the error."""
    from diffgrpo.tasks import splits

    rows = splits.load_pool(study).iloc[:16]
    task = splits.task_of(study)
    s, n = study.probe.sampling, 64

    def p_hat(gen):
        outs = gen.generate(list(rows["prompt"]), n=n, temperature=s.temperature, top_p=s.top_p,
                            max_new_tokens=s.max_new_tokens, seed=7, progress=False)
        return [sum(task.score(c.text, a) for c in cs) / n for cs, a in zip(outs, rows["answer"])]

    ours, theirs = p_hat(vllm_gen), p_hat(hf_gen(study))
    worst = 0.0
    for pid, a, b in zip(rows["id"], ours, theirs):
        pooled = (a + b) / 2
        se = math.sqrt(max(pooled * (1 - pooled), 1 / n) * 2 / n)
        worst = max(worst, abs(a - b) / se)
        assert abs(a - b) <= 3.5 * se, f"prompt {pid}: p_hat vLLM {a:.3f}, HF {b:.3f} ({abs(a - b) / se:.1f} se)"
    print(f"\nsampled p_hat, 16 prompts x {n}: mean vLLM {sum(ours) / 16:.3f}, HF {sum(theirs) / 16:.3f}; "
          f"largest gap {worst:.2f} se")


def test_a_seeded_call_repeats_on_one_engine(vllm_gen, study):
    from diffgrpo.tasks import splits

    prompts = list(splits.load_pool(study)["prompt"][:8])
    a = vllm_gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=48, seed=3, progress=False)
    b = vllm_gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=48, seed=3, progress=False)
    c = vllm_gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=48, seed=4, progress=False)
    assert a == b and a != c


#: the probe's chunked sampling in a process of its own, killed with SIGKILL (its engine with it)
#: as chunk KILL_AT starts; argv: the work folder, the chunk at which to die (-1: never)
PROBE_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from diffgrpo import params
    from diffgrpo.models.resumable_sampling import load_generator, sample_and_score
    from diffgrpo.tasks import splits

    class DieAtChunk:
        def __init__(self, gen, at):
            self.gen, self.at, self.calls = gen, at, 0
        def generate(self, *a, **kw):
            if self.calls == self.at:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            self.calls += 1
            return self.gen.generate(*a, **kw)

    if __name__ == "__main__":
        cfg = params.load("tiny", overrides=json.loads(sys.argv[3]))
        gen = DieAtChunk(load_generator(cfg, batch_size=64, serve_adapters=True), int(sys.argv[2]))
        s = cfg.probe.sampling
        sample_and_score(gen, splits.task_of(cfg), splits.load_pool(cfg), n=cfg.probe.k, temperature=s.temperature,
                         top_p=s.top_p, max_new_tokens=s.max_new_tokens, seed=cfg.probe.seed,
                         work_dir=Path(sys.argv[1]), key={"test": "resume"}, chunk_size=8, progress=False)
""")


def test_a_probe_killed_midway_resumes_to_the_same_result(study, vllm_gen, tmp_path):
    """48 pool prompts in 6 chunks of 8: killed as chunk 2 starts, then run again (a new engine,
    which generates chunks 2-5 and reads 0-1); equal to one uninterrupted engine's probe."""
    from diffgrpo.models.resumable_sampling import sample_and_score
    from diffgrpo.tasks import splits

    work = tmp_path / "killed"
    script = tmp_path / "probe_chunks.py"
    script.write_text(PROBE_SCRIPT)

    def run(die_at: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), str(work), str(die_at), json.dumps(OVERRIDES)],
                              cwd=ROOT, capture_output=True, text=True, start_new_session=True)

    killed = run(2)
    assert killed.returncode == -9, killed.stderr[-3000:]
    written = sorted(p.name for p in work.glob("part-*.parquet"))
    assert written == ["part-00000.parquet", "part-00001.parquet"]
    kept = {p: (work / p).stat().st_mtime_ns for p in written}
    resumed = run(-1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert {p: (work / p).stat().st_mtime_ns for p in written} == kept  # read back, not generated again

    s = study.probe.sampling
    whole = sample_and_score(vllm_gen, splits.task_of(study), splits.load_pool(study), n=study.probe.k,
                             temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens,
                             seed=study.probe.seed, work_dir=tmp_path / "whole", key={"test": "resume"},
                             chunk_size=8, progress=False)
    parts = pd.concat([pd.read_parquet(p) for p in sorted(work.glob("part-*.parquet"))], ignore_index=True)
    pd.testing.assert_frame_equal(parts, whole)


# ---- the named errors, on the real engine ----------------------------------------------------
def test_a_prompt_longer_than_the_engines_context_is_refused(study, vllm_gen):
    from diffgrpo.models.generation import PromptTooLong

    context = vllm_gen.llm.llm_engine.model_config.max_model_len
    assert context == 256  # the embedded model's positions: vLLM's max_model_len when the params give none
    long = [{"role": "user", "content": " ".join(["Alice"] * 300)}]
    with pytest.raises(PromptTooLong, match=r"id 'p-long'.*model's context of 256"):
        vllm_gen.check_prompts(["p-long"], [long], 16, where="rows.parquet")


def test_an_adapter_rank_above_max_lora_rank_is_refused(study, vllm_gen, tmp_path):
    """tiny.yaml's r 4 is served at vLLM's rank 8; an adapter of rank 16 is refused by name."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from diffgrpo.models import resumable_sampling
    from diffgrpo.models.embedded import default_path

    assert vllm_gen.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8
    adapter = tmp_path / "checkpoint-16"
    model = AutoModelForCausalLM.from_pretrained(default_path())
    get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"])).save_pretrained(adapter)
    with pytest.raises(ValueError, match=r"adapter_config.json: LoRA rank r = 16 is above .* max_lora_rank 8"):
        resumable_sampling.load_generator(study, batch_size=4, adapter=adapter)


def test_a_gguf_model_is_refused(study):
    from diffgrpo.models import resumable_sampling
    from diffgrpo.models.embedded import default_path

    cfg = study.replace(**{"model.path": str(default_path()), "model.gguf_file": "model.gguf"})
    with pytest.raises(ValueError, match="gguf_file = 'model.gguf' .not a file.*HF folders only.*generation.backend: hf"):
        resumable_sampling.load_generator(cfg, batch_size=4)
