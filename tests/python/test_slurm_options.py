"""The Slurm node source's checks that need no Slurm cluster (the rest: test_slurm_source.py)."""

import pytest

from bft.runtime.nodes import SourceError, source_class
from bft.runtime.slurm import SlurmNodeSource


def test_registered_under_slurm():
    assert source_class("slurm") is SlurmNodeSource


def test_bad_options_are_rejected_before_slurm_is_asked(tmp_path):
    with pytest.raises(SourceError, match="identity"):
        SlurmNodeSource("has space", tmp_path)
    with pytest.raises(SourceError, match="--slurm-pending"):
        SlurmNodeSource("x", tmp_path, pending=-1)
