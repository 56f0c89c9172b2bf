"""The inputs the manager takes from outside, searched rather than sampled (issue 29, item 5): report
datagrams (anyone on the network may send one), control requests (any local process of the user) and
job dicts. Whatever arrives, the answer is the value or a ValueError, never another exception, and a
datagram changed in any byte is never believed. Fast: no processes, no torch."""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bft import jobs
from bft.runtime.ops import control
from bft.train import protocol

SECRET = bytes.fromhex("ab" * 32)
VALID = protocol.Report("job", 3, 1, 7, 0, 2, False, 1234.0, 1.7e9, 4096)

json_leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=20)


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=600))
def test_any_datagram_is_a_report_or_a_value_error(datagram):
    try:
        protocol.decode(datagram, SECRET)
    except ValueError:
        pass


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_a_signed_datagram_changed_anywhere_is_refused(data):
    signed = protocol.encode(VALID, SECRET)
    assert protocol.decode(signed, SECRET) == VALID
    kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    at = data.draw(st.integers(0, len(signed) - 1))
    if kind == "flip":
        changed = signed[:at] + bytes([signed[at] ^ data.draw(st.integers(1, 255))]) + signed[at + 1:]
    elif kind == "cut":
        changed = signed[:at]
    else:
        changed = signed[:at] + data.draw(st.binary(min_size=1, max_size=8)) + signed[at:]
    with pytest.raises(ValueError):
        protocol.decode(changed, SECRET)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.binary(max_size=400), json_values.map(lambda v: json.dumps(v).encode()),
                 st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth)))
def test_any_request_line_is_an_object_or_a_value_error(line):
    try:
        assert isinstance(control.parse_request(line), dict)
    except ValueError:
        pass


SUBMIT_KEYS = ["name", "script", "cwd", "args", "python", "min_nodes", "max_nodes", "work", "max_retries",
               "resize", "curve", "configurations"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_submit_request_is_a_job_or_a_value_error(tmp_path, data):
    """Each field valid or anything JSON can carry, in any mix: the request becomes a job or one
    ValueError (bft submit prints it as one line and exits 2)."""
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    valid = {"name": "j", "script": str(script), "cwd": str(tmp_path), "args": [], "python": sys.executable,
             "min_nodes": 1, "max_nodes": 4, "work": 100.0, "max_retries": 2, "resize": "",
             "curve": {"nodes": [1, 4], "throughput": [10.0, 40.0]},
             "configurations": [{"name": "half", "efficiency": 0.5, "speedup": 1.5}]}
    request = {}
    for key in SUBMIT_KEYS:
        choice = data.draw(st.sampled_from(["valid", "other", "absent"]), label=key)
        if choice == "valid":
            request[key] = valid[key]
        elif choice == "other":
            request[key] = data.draw(json_values, label=key)
    try:
        row = control.job_from_request(request, 2)
    except ValueError:
        return
    assert row.min_nodes <= row.max_nodes and os.path.isfile(row.script)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from([name for name, _, _ in jobs.job_fields()] + ["other"]), json_values,
                       max_size=14))
def test_any_job_dict_is_a_job_or_a_value_error(fields):
    try:
        jobs.from_dict(fields)
    except ValueError:
        pass
