"""The Slurm node source's checks that need no Slurm cluster (the rest: test_slurm_source.py)."""

import pytest

from bft.runtime.sources.base import SourceError, source_class
from bft.runtime.sources.slurm import SlurmNodeSource


def test_registered_under_slurm():
    assert source_class("slurm") is SlurmNodeSource


def test_bad_options_are_rejected_before_slurm_is_asked(tmp_path):
    with pytest.raises(SourceError, match="identity"):
        SlurmNodeSource("has space", tmp_path)
    with pytest.raises(SourceError, match="--slurm-pending"):
        SlurmNodeSource("x", tmp_path, pending=-1)


@pytest.mark.parametrize("bad", ["0", "-1", "two", "a100:", "a100:0", ":2", "a b:2"])
def test_bad_gpus_per_node_is_rejected_naming_the_flag(tmp_path, bad):
    with pytest.raises(SourceError, match=r"--slurm-gpus-per-node takes N or TYPE:N .*got"):
        SlurmNodeSource("x", tmp_path, gpus_per_node=bad)
