"""``tj.knobs`` is the settings object (``tj.knobs.debug = True``), not the module."""
import pytest

import tilejit as tj
import tilejit.knobs  # noqa: F401  (importing the module must not rebind tj.knobs)
from tilejit.knobs import knobs


def test_tj_knobs_is_the_settings_object():
    assert tj.knobs is knobs
    with tj.knobs.scoped(print_autotuning=True):
        assert knobs.print_autotuning is True


def test_a_misspelt_knob_is_an_error():
    with pytest.raises(AttributeError, match="no knob named 'print_autotunning'"):
        tj.knobs.print_autotunning = True
