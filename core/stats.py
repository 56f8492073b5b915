"""Sample sizes and 95% intervals for every rate a run reports (an accuracy from 4 puzzles is noise): Wilson score
intervals (better than Wald's for small n and rates near 0 or 1), and a change counts only when Newcombe's interval
for the difference (1998, method 10) excludes 0.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


def rounded_mean(values) -> float | None:
    """The mean to 4 decimals, as validation rows hold their rates; None for no values.

    >>> rounded_mean([1.0, 0.0, 0.0]), rounded_mean([])
    (0.3333, None)
    """
    values = list(values)
    return round(sum(values) / len(values), 4) if values else None


def wilson_interval(rate: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `rate` observed over `n` trials (for a mean@k, `n` counts the
    independent puzzles); n = 0 says nothing: (0, 1).

    >>> [round(x, 4) for x in wilson_interval(81 / 263, 263)]  # the textbook example: 0.2553 to 0.3662
    [0.2553, 0.3662]
    >>> [round(x, 3) for x in wilson_interval(0.5, 4)]
    [0.15, 0.85]
    >>> [round(x, 3) for x in wilson_interval(0.0, 100)]  # never 0..0: 100 failures still allow ~3.7%
    [0.0, 0.037]
    >>> [round(x, 3) for x in wilson_interval(0.63, 100)]
    [0.532, 0.718]
    >>> wilson_interval(0.3, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return 0.0, 1.0
    rate = min(1.0, max(0.0, float(rate)))
    z2 = z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def difference_interval(a: float, n_a: int, b: float, n_b: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's 95% interval for `b - a` (two proportions over n_a and n_b trials), from their Wilson intervals;
    his own example, 56/70 against 48/80, gives 0.0524 to 0.3339:

    >>> [round(x, 4) for x in difference_interval(48 / 80, 80, 56 / 70, 70)]
    [0.0524, 0.3339]
    >>> low, high = difference_interval(0.25, 4, 0.75, 4)  # 1/4 -> 3/4 puzzles: could be chance
    >>> low < 0 < high
    True
    """
    low_a, high_a = wilson_interval(a, n_a, z)
    low_b, high_b = wilson_interval(b, n_b, z)
    d = b - a
    return d - math.sqrt((b - low_b) ** 2 + (high_a - a) ** 2), d + math.sqrt((high_b - b) ** 2 + (a - low_a) ** 2)


def change(a: float | None, n_a: int | None, b: float | None, n_b: int | None) -> int:
    """+1 when `b` is above `a` beyond chance (the difference's interval excludes 0), -1 below, 0 otherwise.

    >>> change(0.1, 100, 0.3, 100), change(0.3, 100, 0.1, 100), change(0.25, 4, 0.75, 4), change(None, 4, 0.5, 4)
    (1, -1, 0, 0)
    """
    if a is None or b is None or not n_a or not n_b:
        return 0
    low, high = difference_interval(a, n_a, b, n_b)
    return 1 if low > 0 else -1 if high < 0 else 0


def rate_text(rate: float | None, n: int | None, *, digits: int = 3, with_n: bool = True) -> str:
    """A rate as text with its 95% interval and n: "0.630 [0.53, 0.72] n=100"; "-" when missing.

    >>> rate_text(0.63, 100), rate_text(0.5, 4, with_n=False), rate_text(None, 4), rate_text(0.5, None)
    ('0.630 [0.53, 0.72] n=100', '0.500 [0.15, 0.85]', '-', '0.500 (n unknown)')
    """
    if rate is None:
        return "-"
    if not n:
        return f"{rate:.{digits}f} (n unknown)"
    low, high = wilson_interval(rate, n)
    return f"{rate:.{digits}f} [{low:.2f}, {high:.2f}]" + (f" n={n}" if with_n else "")


def percent_text(rate: float | None, n: int | None) -> str:
    """A rate in percent with its 95% interval, narrow enough for a console column: "63 (53-72)".

    >>> percent_text(0.63, 100), percent_text(1.0, 4), percent_text(None, 4)
    ('63 (53-72)', '100 (51-100)', '-')
    """
    if rate is None or not n:
        return "-"
    low, high = wilson_interval(rate, n)
    return f"{100 * rate:.0f} ({100 * low:.0f}-{100 * high:.0f})"
