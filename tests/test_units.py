import pytest

from collsynth.errors import CollsynthError
from collsynth.units import parse_arrivals, parse_rate, parse_size, parse_time, rank_ranges


@pytest.mark.parametrize("text,value", [("1GiB", 2**30), ("32MiB", 32 * 2**20), ("1.5KB", 1500), ("4096", 4096),
                                        ("2GB", 2 * 10**9), ("10B", 10), ("1KiB", 1024)])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text,value", [("3us", 3e-6), ("5ms", 5e-3), ("2s", 2.0), ("40ns", 40e-9), ("0", 0.0)])
def test_times(text, value):
    assert parse_time(text) == pytest.approx(value)


def test_rates():
    assert parse_rate("450GiB/s") == 450 * 2**30
    assert parse_rate("25GB/s") == 25e9


@pytest.mark.parametrize("bad", ["-1GiB", "0", "1XB", "lots"])
def test_bad_sizes(bad):
    with pytest.raises(CollsynthError):
        parse_size(bad)


def test_bad_time_and_rate():
    with pytest.raises(CollsynthError):
        parse_time("-3us")
    with pytest.raises(CollsynthError):
        parse_time("3 parsecs")
    with pytest.raises(CollsynthError):
        parse_rate("0GB/s")


def test_arrivals():
    assert parse_arrivals(["7=5ms", "0=1us"], 8) == {7: 5e-3, 0: 1e-6}
    with pytest.raises(CollsynthError, match="does not exist"):
        parse_arrivals(["9=5ms"], 8)
    with pytest.raises(CollsynthError, match="RANK=TIME"):
        parse_arrivals(["9"], 8)
    for twice in (["5=10ms,5=3ms"], ["5=10ms", "5=10ms"]):  # the same rank twice, one flag or two
        with pytest.raises(CollsynthError, match="names rank 5 twice"):
            parse_arrivals(twice, 8)


def test_rank_ranges():
    assert rank_ranges([0, 1, 2, 5]) == "0-2,5"
    assert rank_ranges([]) == "" and rank_ranges([7]) == "7" and rank_ranges((3, 4)) == "3-4"
    assert rank_ranges([0, 2, 4, 5, 6, 9]) == "0,2,4-6,9"
