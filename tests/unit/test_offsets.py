"""Which offsets a reading task asks Spark for next."""

import pytest

from sluice.stream.offsets import END_OF_STREAM, is_finished, next_ranges


@pytest.mark.parametrize("current, latest, end, cap, expected", [
    ({0: 0}, {0: 100}, {}, 1000, {0: (0, 100)}),                        # all that is there
    ({0: 0}, {0: 100}, {0: 40}, 1000, {0: (0, 40)}),                    # never past the end offsets
    ({0: 0, 1: 0}, {0: 100, 1: 100}, {}, 50, {0: (0, 25), 1: (0, 25)}),  # the cap is shared
    ({0: 0, 1: 0}, {0: 5, 1: 100}, {}, 50, {0: (0, 5), 1: (0, 45)}),    # unused share passes on
    ({0: 10, 1: 3}, {0: 10, 1: 3}, {}, 50, {}),                         # nothing new
])
def test_next_ranges(current, latest, end, cap, expected):
    assert next_ranges(current, latest, end, cap) == expected


def test_reading_is_finished_only_when_every_partition_reached_its_end():
    assert not is_finished({0: 5, 1: 9}, {0: END_OF_STREAM, 1: END_OF_STREAM})
    assert not is_finished({0: 5, 1: 9}, {0: 5, 1: 10})
    assert is_finished({0: 5, 1: 10}, {0: 5, 1: 10})
