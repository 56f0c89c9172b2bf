"""The judgement of in-place workers' heartbeats (bft.runtime.jobs.heartbeats): which worker is hung."""

from bft.runtime.jobs.heartbeats import (
    HUNG_STEPS,
    JITTER_LEARN_S,
    JITTER_MARGIN,
    JITTER_WINDOW_S,
    MIN_FLOOR_S,
    UNSURE_FLOOR_S,
    Heartbeats,
)

TIMEOUT_S = 30.0
STEP_S = 0.1  # 10 steps a second: 20 steps are 2 s, so the bound is the floor


class Job:
    """Two workers (n0 pid 1, n1 pid 2) whose heartbeats are read once a second."""

    def __init__(self, step_s: float = STEP_S):
        self.hb = Heartbeats(TIMEOUT_S)
        self.t = 0
        self.step_s = step_s
        self.beats = {"n0": 0, "n1": 0}
        self.steps = {"n0": 0.0, "n1": 0.0}

    def second(self, frozen=(), stuck=(), late=()):
        self.t += 1
        values = {}
        for node, pid in (("n0", 1), ("n1", 2)):
            if node not in frozen and node not in late:
                self.beats[node] += 1
                if node not in stuck and not frozen:
                    self.steps[node] += 1 / self.step_s
            waiting = bool(stuck or frozen) and node not in stuck and node not in frozen
            values[(node, pid)] = f"{self.beats[node]} {int(self.steps[node])} {int(waiting)}"
        return sorted(self.hb.hung("el", values, float(self.t)))


def test_a_frozen_worker_is_hung_after_the_floor_whatever_its_step_time():
    """Its beats, which a thread of their own sends whatever the script does, stopped: judged against
    how late a beat can be (the floor), not against 20 of the job's steps."""
    job = Job(step_s=2.0)  # slow steps: 20 of them are 40 s, far past the floor
    assert not any(job.second() for _ in range(10))
    assert job.hb.silent_bound_s("el") == MIN_FLOOR_S  # beats every read: the floor is its minimum
    assert job.hb.stuck_bound_s("el") > 2 * MIN_FLOOR_S
    hung = [job.second(frozen=("n1",)) for _ in range(15)]
    first = next(k for k, h in enumerate(hung) if h)  # seconds since its last beat - 1
    assert hung[first] == ["n1"] and MIN_FLOOR_S <= first + 1 <= MIN_FLOOR_S + 1


def test_a_stuck_worker_is_judged_against_its_jobs_steps_and_not_before():
    job = Job()
    assert not any(job.second() for _ in range(10))
    bound = max(MIN_FLOOR_S, HUNG_STEPS * STEP_S)
    assert abs(job.hb.stuck_bound_s("el") - bound) < 1e-9
    hung = [job.second(stuck=("n1",)) for _ in range(15)]
    first = next(k for k, h in enumerate(hung) if h)
    assert hung[first] == ["n1"] and bound <= first + 1 <= bound + 1


def test_the_floor_is_unsure_until_the_beats_are_known_then_follows_the_longest_recent_pause():
    job = Job()
    job.second()
    assert job.hb.floor_s("el") == UNSURE_FLOOR_S  # nothing measured yet
    for _ in range(int(JITTER_LEARN_S) + 1):
        job.second()
    assert job.hb.floor_s("el") == MIN_FLOOR_S
    job.second(late=("n1",))  # a loaded machine: n1's beat comes 3 s apart once, and is not hung for it
    job.second(late=("n1",))
    assert job.second() == []
    assert job.hb.floor_s("el") == JITTER_MARGIN * 3
    frozen = [job.second(frozen=("n1",)) for _ in range(int(JITTER_MARGIN * 3) + 2)]
    assert frozen[int(JITTER_MARGIN * 3) - 3] == [] and frozen[-1] == ["n1"], frozen  # the longer bound held
    job = Job()
    for _ in range(3):
        job.second()
    job.second(late=("n0",))
    job.second(late=("n0",))
    for _ in range(int(JITTER_WINDOW_S) + 2):  # a minute of punctual beats: the stall is forgotten
        job.second()
    assert job.hb.floor_s("el") == MIN_FLOOR_S


def test_a_worker_stuck_between_boundaries_while_its_peer_waits_is_hung():
    job = Job()
    assert not any(job.second() for _ in range(5))
    hung = [job.second(stuck=("n1",)) for _ in range(15)]
    assert hung[-1] == ["n1"] and all(h in ([], ["n1"]) for h in hung)


def test_no_worker_is_hung_while_every_one_is_silent_or_a_new_process_starts_beating():
    hb = Heartbeats(TIMEOUT_S)
    for t in range(60):  # nobody beats: nothing tells a hung worker from a silent job (or keeper)
        assert hb.hung("el", {("n0", 1): "1 1 0", ("n1", 2): "1 1 0"}, float(t)) == {}
    assert hb.stuck_bound_s("el") == TIMEOUT_S  # no step measured yet: the in-place timeout
    # n1's worker was replaced (a new pid): its predecessor's last heartbeat is not held against it.
    assert hb.hung("el", {("n0", 1): "50 50 0", ("n1", 3): "1 1 0"}, 61.0) == {}


def test_processes_per_node_one_frozen_process_makes_its_node_hung_though_its_sibling_beats():
    """Two processes per node: n1's local rank 0 (pid 3) freezes while every other process, its own
    node's rank 1 included, beats and waits at the boundary: n1 is hung, named once."""
    hb = Heartbeats(TIMEOUT_S)
    beats = {("n0", 1): 0, ("n0", 2): 0, ("n1", 3): 0, ("n1", 4): 0}
    steps = dict.fromkeys(beats, 0)
    hung = []
    for t in range(1, 40):
        for proc in beats:
            if t <= 5 or proc != ("n1", 3):
                beats[proc] += 1
                steps[proc] += int(1 / STEP_S) if t <= 5 else 0
        waiting = t > 5
        hung.append(sorted(hb.hung("el", {p: f"{beats[p]} {steps[p]} {int(waiting and p != ('n1', 3))}"
                                           for p in beats}, float(t))))
    assert hung[-1] == ["n1"] and all(h in ([], ["n1"]) for h in hung), hung
