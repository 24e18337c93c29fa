"""A study's stages in order, each a notebook (``notebooks/<stage>.ipynb``,
:mod:`diffgrpo.study.notebooks`). A module of its own, with no import: every notebook job
process of a study reads it, and the rest of :mod:`diffgrpo.params` (pydantic, pandas) would
cost each of them most of a second."""

STAGES = ("01_probe", "02_select", "03_train", "04_evaluate", "05_analyze")
