"""The model a study names, and generating from it.

- :mod:`.resolve`: which files a params' model and dataset name, and their fingerprints;
- :mod:`.loading`: loading a HF folder, a GGUF file or the embedded model, plus LoRA;
- :mod:`.embedded`: the embedded default model (a tiny Qwen2 pretrained here);
- :mod:`.devices`: where a model runs, and how an update is split over processes;
- :mod:`.generation`: the generation interface and its HF backend;
- :mod:`.vllm_engine`: the vLLM backend (the GPU environment, or vLLM's CPU build: docs/gpu.md);
- :mod:`.resumable_sampling`: generate and score completions in resumable chunks (probe, evaluation).
"""
