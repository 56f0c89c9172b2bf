"""bft.train.ElasticSampler: across grows, shrinks and crashes, every sample index of an epoch is
processed exactly once (at least once for steps redone after a crash). Each generation of the job is
simulated in-process by one sampler per rank, built from the last checkpointed state."""

import contextlib
import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bft.train as bt
from bft.train.sampler import ElasticSampler


def run_generation(state, size, world, batch, steps, checkpoint_after):
    """Runs ``steps`` steps at ``world`` ranks from ``state``; returns (the processed indices in the
    stream's order, the state checkpointed after ``checkpoint_after`` steps by rank 0)."""
    samplers = []
    for rank in range(world):
        s = ElasticSampler(size, seed=7, rank=rank, world_size=world)
        if state is not None:
            s.load_state_dict(state)
        samplers.append(s)
    iterators = [iter(s) for s in samplers]
    processed = []
    checkpoint = samplers[0].state_dict() if checkpoint_after == 0 else state
    for step in range(steps):
        batches = [[next(it) for _ in range(batch)] for it in iterators]
        # The documented layout: rank r holds the step's positions r, r + world, ...
        processed.extend(batches[r][j] for j in range(batch) for r in range(world))
        for s in samplers:
            s.record(batch * world)
        assert len({tuple(sorted(s.state_dict().items())) for s in samplers}) == 1
        if step + 1 == checkpoint_after:
            checkpoint = samplers[0].state_dict()
    return processed, checkpoint


def assert_epochs_exactly_once(stream, size):
    for start in range(0, len(stream), size):
        epoch = stream[start:start + size]
        counts = Counter(epoch)
        assert set(counts) <= set(range(size))
        assert max(counts.values()) == 1, f"epoch {start // size} repeats {counts.most_common(1)}"
        if len(epoch) == size:
            assert sorted(epoch) == list(range(size))


generations = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 12)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 50), batch=st.integers(1, 9), plan=generations)
def test_each_index_once_per_epoch_across_grows_and_shrinks(size, batch, plan):
    state, stream = None, []
    for world, steps in plan:
        processed, state = run_generation(state, size, world, batch, steps, checkpoint_after=steps)
        stream.extend(processed)
    assert state is None or state["samples"] == len(stream)
    assert_epochs_exactly_once(stream, size)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), batch=st.integers(1, 6),
       plan=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=6))
def test_steps_after_the_last_checkpoint_are_redone_after_a_crash(size, batch, plan):
    """A generation that crashes resumes from its last checkpoint: the steps after it are processed
    again (at least once), and the steps that count (up to each checkpoint) are exactly once."""
    state, committed, everything = None, [], []
    for world, steps, lost in plan:
        processed, state = run_generation(state, size, world, batch, steps + lost, checkpoint_after=steps)
        committed.extend(processed[:steps * batch * world])
        everything.extend(processed)
    assert_epochs_exactly_once(committed, size)
    assert Counter(everything) >= Counter(committed)


def test_a_new_epoch_has_a_new_permutation_and_every_process_computes_the_same():
    s = ElasticSampler(100, seed=3)
    first, second = s.indices(0, 100), s.indices(100, 200)
    assert sorted(first) == sorted(second) == list(range(100))
    assert first != second
    assert ElasticSampler(100, seed=3).indices(0, 200) == first + second
    assert ElasticSampler(100, seed=4).indices(0, 100) != first
    assert ElasticSampler(100, shuffle=False).indices(95, 105) == [95, 96, 97, 98, 99, 0, 1, 2, 3, 4]


def test_the_epoch_follows_the_recorded_samples():
    s = ElasticSampler(10)
    s.record(8)
    assert s.epoch == 0
    s.record(8)
    assert (s.epoch, s.samples) == (1, 16)


@given(size=st.integers(1, 30), sizes=st.lists(st.integers(0, 7), min_size=1, max_size=5),
       steps=st.integers(1, 10))
def test_steps_cut_from_indices_with_unequal_batches_cover_each_epoch_once(size, sizes, steps):
    s = ElasticSampler(size, seed=1)
    stream = []
    for _ in range(steps):
        block = s.indices(s.samples, s.samples + sum(sizes))
        cuts = [sum(sizes[:r]) for r in range(len(sizes) + 1)]
        stream.extend(i for r in range(len(sizes)) for i in block[cuts[r]:cuts[r + 1]])
        s.record(sum(sizes))
    assert stream == s.indices(0, s.samples)
    assert_epochs_exactly_once(stream, size)


def test_rank_and_world_default_to_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = bt.ElasticSampler(12, shuffle=False, samples=3)
    it = iter(s)
    assert [next(it) for _ in range(5)] == [4, 7, 10, 1, 4]


@pytest.mark.parametrize("state, field", [
    ({"size": 11, "seed": 0, "shuffle": True, "samples": 0}, "size"),
    ({"size": 10, "seed": 0, "shuffle": True}, "'samples'"),
    ({"size": 10, "seed": 0, "shuffle": True, "samples": -1}, "samples"),
])
def test_a_checkpoint_that_does_not_fit_is_an_error_naming_the_field(state, field):
    with pytest.raises(ValueError, match=field):
        ElasticSampler(10).load_state_dict(state)


@pytest.mark.parametrize("kwargs, field", [
    ({"size": 0}, "size"), ({"size": 5, "samples": -2}, "samples"), ({"size": 5, "rank": 2, "world_size": 2}, "rank"),
])
def test_bad_arguments_are_errors_naming_the_argument(kwargs, field):
    with pytest.raises(ValueError, match=field):
        iter(ElasticSampler(**kwargs))


def test_a_dataloader_reads_the_ranks_share_in_full_batches():
    torch = pytest.importorskip("torch")
    data = torch.arange(10)
    s = ElasticSampler(10, seed=5, samples=7, rank=1, world_size=2)
    loader = torch.utils.data.DataLoader(data, batch_size=3, sampler=s)
    batches = [b.tolist() for b, _ in zip(loader, range(3))]
    assert batches[0] == s.indices(7, 20)[1::2][:3]
    assert [len(b) for b in batches] == [3, 3, 3]


@contextlib.contextmanager
def _worker_environment(rank, world):
    """RANK and WORLD_SIZE as the in-place worker sets them, for the duration."""
    old = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


# Generations of a job with several processes per node: (its nodes, survivors first, as the manager
# orders them; steps at it). Node names are drawn from a small set so that nodes stay, leave and come back.
node_generations = st.lists(st.tuples(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True),
                                      st.integers(0, 10)), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 60), batch=st.integers(1, 5), per_node=st.integers(1, 4), plan=node_generations)
def test_processes_per_node_each_read_their_share_and_every_index_once_per_epoch(size, batch, per_node, plan):
    """Each process takes the rank the in-place worker takes (bft.train.elastic.node_major_rank: node i's
    N processes hold ranks i*N .. i*N+N-1) and reads `batch` indices per step from the sampler with
    its rank and world from the environment, as a worker does: across generations of any nodes, each
    process reads a full share each step, the shares of a step are disjoint, and every index of every
    epoch is read exactly once."""
    from bft.train.elastic import node_major_rank

    state, stream = None, []
    for nodes, steps in plan:
        iterators = {}
        for node in nodes:
            for local_rank in range(per_node):
                rank, world = node_major_rank(nodes, node, local_rank, per_node)
                sampler = ElasticSampler(size, seed=3)
                if state is not None:
                    sampler.load_state_dict(state)
                with _worker_environment(rank, world):  # what the sampler reads as its iteration starts
                    iterators[rank] = (sampler, iter(sampler))
        world = len(nodes) * per_node
        assert sorted(iterators) == list(range(world))
        for _ in range(steps):
            shares = {r: [next(it) for _ in range(batch)] for r, (_, it) in iterators.items()}
            stream.extend(shares[r][j] for j in range(batch) for r in range(world))
            for sampler, _ in iterators.values():
                sampler.record(batch * world)
        state = iterators[0][0].state_dict()
    assert state["samples"] == len(stream)
    assert_epochs_exactly_once(stream, size)
