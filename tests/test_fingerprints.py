"""Every recorded run gives the same bits as when its fingerprint was recorded (issue 18).

The runs and what is digested are in ``tests/fingerprints.py``; the digests were recorded before
the simulator was split into its four wings, so this test is what shows the move changed no result:
parameters, history, per-round log and ledger, summaries, checkpoint files mid-run and at the end,
a probed run's report and two ``cvfl reproduce --quick`` experiments' tables. A change of results
that is intended is recorded anew with ``python tests/fingerprints.py --write``, and said so.
"""

import json

import pytest
from fingerprints import EXPECTED, child_digests, differences, digest

pytestmark = pytest.mark.slow


def test_every_run_has_its_recorded_fingerprint():
    want = json.loads(EXPECTED.read_text())
    assert len(want) >= 20
    got = child_digests()
    assert differences(got, want) == []


def test_a_changed_bit_changes_the_digest():
    # the digest of a float is that of its exact repr: one ulp apart gives another digest
    import math

    x = 0.1
    assert digest([x]) != digest([math.nextafter(x, 1.0)])
    assert digest([x], digits=10) == digest([math.nextafter(x, 1.0)], digits=10)
