"""diffgrpo: which prompts should GRPO train on? A study kit: probe, select, train, evaluate, analyze."""

__version__ = "0.1.0"
