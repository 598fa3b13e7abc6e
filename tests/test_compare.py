"""The one comparison of cupy_csrattn.testing: what it lets through and what it does not."""

import numpy as np
import pytest

from cupy_csrattn.testing.compare import assert_close


def test_a_cancelling_sum_is_judged_on_its_terms():
    """A float32 sum of large terms that cancel to 0.03 carries rounding of order
    1e-7 * (sum of |terms|): accepted with the bound, refused without it."""
    expected = np.array([0.03, 0.02])
    got = expected + np.array([2e-6, 0.0])  # 2e-6 / 0.03 = 6.7e-5 relative
    with pytest.raises(AssertionError):
        assert_close(got, expected, np.float32)
    assert_close(got, expected, np.float32, bound=np.array([120.0, 0.02]))


def test_the_bound_still_catches_errors_beyond_it():
    expected = np.array([0.03, 0.02])
    bound = np.array([120.0, 0.02])
    with pytest.raises(AssertionError):
        assert_close(expected + np.array([1e-2, 0.0]), expected, np.float32, bound=bound)  # > 1e-5 * 120
    with pytest.raises(AssertionError):
        # an element whose terms do not cancel keeps the plain tolerance
        assert_close(expected + np.array([0.0, 5e-5]), expected, np.float32, bound=bound)


def test_nan_and_infinities_are_not_excused_by_the_bound():
    expected = np.array([0.5, np.inf])
    with pytest.raises(AssertionError):
        assert_close(np.array([np.nan, np.inf]), expected, np.float32, bound=np.array([1e6, 1e6]))
    with pytest.raises(AssertionError):
        assert_close(np.array([0.5, 1e30]), expected, np.float32, bound=np.array([1e6, np.inf]))
