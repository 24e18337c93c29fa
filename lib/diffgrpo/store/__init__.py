"""What a study keeps on disk, and when it may be reused.

- :mod:`.artifacts`: plain files under the outputs root, written atomically, read with named errors;
- :mod:`.layout`: where every artifact lives (every path and file name of a study folder);
- :mod:`.run_folder`: one training run's folder (manifest, level records, resume, damage checks).
"""
